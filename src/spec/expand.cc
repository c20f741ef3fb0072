#include "spec/expand.h"

#include <cmath>
#include <limits>
#include <memory>
#include <queue>

#include "core/error.h"

namespace ts::spec {

void validate_tree_params(const TreeParams& params) {
  TS_CHECK(params.theta >= 0 && std::isfinite(params.theta), "tree: theta must be finite and >= 0, got ",
           params.theta);
  TS_CHECK(params.node_cap >= 0, "tree: node_cap must be >= 0, got ", params.node_cap);
  TS_CHECK(params.branch_cap >= 0, "tree: branch_cap must be >= 0, got ", params.branch_cap);
  TS_CHECK(params.draft_len >= 0, "tree: draft_len must be >= 0, got ", params.draft_len);
  TS_CHECK(params.temperature >= 0 && std::isfinite(params.temperature),
           "tree: draft temperature must be finite and >= 0, got ", params.temperature);
  TS_CHECK(params.batch >= 1, "tree: batch must be >= 1, got ", params.batch);
  if (params.cost_model) params.cost_model->validate();
}

namespace {

// A node that may still get children.
struct OpenParent {
  double log_survival = 0;
  bool loaded = false;           // its q has been computed (when its slot first reached the top)
  std::vector<int32_t> top;      // its top-branch_cap tokens by q (q desc, index asc)
  std::vector<double> top_q;     // their q
  std::vector<double> remaining;  // sampling only: [vocab] q with the drawn tokens zeroed = the next draw's weights
  std::vector<int32_t> drawn;    // children drawn so far, in draw order
};

// A heap entry. log_bound bounds log(survival) of the node's next child; for a node whose q is not loaded yet it
// is the node's own log survival (p_hat <= 1).
struct Slot {
  double log_bound;
  int32_t node;
  bool has_q;
};

// Max-heap order: higher bound first; on ties a not-yet-loaded slot first (so loading never reorders admissions),
// then the lower node index. A node has at most one slot in the heap, so the order is total.
struct SlotBelow {
  bool operator()(const Slot& x, const Slot& y) const {
    if (x.log_bound != y.log_bound) return x.log_bound < y.log_bound;
    if (x.has_q != y.has_q) return x.has_q;
    return x.node > y.node;
  }
};

// The count largest tokens of probs ([vocab]), ordered by (prob desc, index asc), in one pass that keeps a small
// sorted list: O(vocab) when count is small, no vocabulary-sized sort.
void select_top(const float* probs, int vocab, int count, std::vector<int32_t>* top, std::vector<double>* top_q) {
  top->clear();
  float smallest_kept = 0;
  for (int32_t t = 0; t < vocab; ++t) {
    const float v = probs[t];
    if (static_cast<int>(top->size()) == count && !(v > smallest_kept)) continue;  // ties keep the lower index
    auto pos = top->end();
    while (pos != top->begin() && probs[*(pos - 1)] < v) --pos;
    top->insert(pos, t);
    if (static_cast<int>(top->size()) > count) top->pop_back();
    smallest_kept = probs[top->back()];
  }
  top_q->resize(top->size());
  for (size_t i = 0; i < top->size(); ++i) (*top_q)[i] = probs[(*top)[i]];
}

// The largest q among the parent's not-yet-drawn tokens (0 when none is left). After j < branch_cap draws one of
// top[0..j] is undrawn, so top holds the answer.
double next_remaining_q(const OpenParent& p, int32_t* token) {
  for (size_t i = 0; i < p.top.size(); ++i) {
    bool drawn = false;
    for (int32_t d : p.drawn) drawn |= d == p.top[i];
    if (!drawn) {
      *token = p.top[i];
      return p.top_q[i];
    }
  }
  *token = -1;
  return 0;
}

// Vocabulary-sized buffers are recycled between parents instead of reallocated.
class BufferPool {
 public:
  std::vector<double> take() {
    if (spare_.empty()) return {};
    std::vector<double> v = std::move(spare_.back());
    spare_.pop_back();
    return v;
  }
  void give(std::vector<double>* v) {
    if (v->capacity() > 0) spare_.push_back(std::move(*v));
    *v = {};
  }

 private:
  std::vector<std::vector<double>> spare_;
};

}  // namespace

DraftTree expand(const DraftSource& source, int32_t anchor, const TreeParams& params, const Calibration& calibration,
                 Chooser& chooser) {
  validate_tree_params(params);
  TS_CHECK(source.vocab > 0 && source.block_size >= 0, "tree: DraftSource needs vocab > 0 and block_size >= 0, got ",
           source.vocab, " and ", source.block_size);
  TS_CHECK(anchor >= 0 && anchor < source.vocab, "tree: anchor token ", anchor, " outside [0, ", source.vocab, ")");
  TS_CHECK(calibration.a > 0, "tree: calibration slope a must be > 0 (p_hat increasing in q), got ", calibration.a);

  const int vocab = source.vocab;
  const bool chain = params.mode == TreeMode::Chain;
  const int node_cap = chain ? params.draft_len : params.node_cap;
  const int branch_cap = chain ? 1 : params.branch_cap;
  const bool calibrated = params.mode == TreeMode::Tree || chain;
  const bool sampling = params.temperature > 0;
  const QSource q_source = params.mode == TreeMode::Marginal ? QSource::Base : QSource::Conditional;
  // The rank is the child's sibling rank, known before the draw (0 for a parent's first child).
  const auto log_p_hat = [&](double q, int rank) { return calibrated ? calibration.log_p_hat(q, rank) : std::log(q); };
  const double log_theta = chain ? -std::numeric_limits<double>::infinity() : std::log(params.theta);

  DraftTree tree;
  tree.q_source = q_source;
  tree.draft_temperature = params.temperature;
  tree.add(anchor, -1, 0, 1.0, 1.0f);
  if (node_cap == 0 || branch_cap == 0 || source.block_size == 0) return tree;

  std::vector<OpenParent> open(1);  // [tree size], indexed by node
  open.reserve(node_cap + 1);
  std::priority_queue<Slot, std::vector<Slot>, SlotBelow> heap;
  heap.push(Slot{0.0, 0, false});
  // Marginal q depends only on the depth: computed once per depth, shared by every parent there.
  std::vector<std::vector<float>> marginal_probs(source.block_size + 1);  // [depth][vocab]
  std::vector<float> probs(vocab);  // [vocab] the q being loaded
  BufferPool pool;
  double expected_tokens = 1;  // 1 + sum of survivals
  const auto close = [&](OpenParent* p) {
    pool.give(&p->remaining);
    p->top.clear();
  };

  while (!heap.empty() && tree.size() - 1 < node_cap) {
    const Slot slot = heap.top();
    heap.pop();
    double log_threshold = log_theta;
    if (!chain && params.cost_model) {
      const double dynamic = adaptive_theta(*params.cost_model, params.batch, tree.size(), expected_tokens);
      log_threshold = std::max(log_threshold, std::log(dynamic));
    }
    if (slot.log_bound < log_threshold) break;  // every other slot's bound is no higher

    const int32_t parent = slot.node;
    int32_t token = -1;
    if (!slot.has_q) {  // load the parent's q, then re-queue it under its real bound (nothing is admitted yet)
      OpenParent& p = open[parent];
      const int child_depth = tree.depth[parent] + 1;
      const float* q = probs.data();
      if (q_source == QSource::Base) {
        std::vector<float>& shared = marginal_probs[child_depth];
        if (shared.empty()) {
          shared.resize(vocab);
          draft_probs_f32(source, q_source, child_depth, -1, params.temperature, shared.data());
        }
        q = shared.data();
      } else {
        draft_probs_f32(source, q_source, child_depth, tree.token[parent], params.temperature, probs.data());
      }
      select_top(q, vocab, branch_cap, &p.top, &p.top_q);
      if (sampling) {
        p.remaining = pool.take();
        p.remaining.assign(q, q + vocab);  // widened exactly as draft_distribution() widens for verify()
      }
      p.loaded = true;
      const double next_q = next_remaining_q(p, &token);
      if (next_q > 0) {
        heap.push(Slot{p.log_survival + log_p_hat(next_q, 0), parent, true});
      } else {
        close(&p);
      }
      continue;
    }

    // Admitted. Now draw: sampled from the remaining q (the chooser normalises; verify() divides by the same sum),
    // or greedily the largest remaining q, whose survival is the bound just admitted.
    double child_q;
    {
      OpenParent& p = open[parent];
      if (sampling) {
        token = chooser.choose(p.remaining.data(), vocab);
        child_q = p.remaining[token];
        p.remaining[token] = 0;
      } else {
        child_q = next_remaining_q(p, &token);
      }
      if (sampling && params.peek_admission_for_negative_test && !params.peek_admission_for_negative_test(child_q)) {
        close(&p);  // the lossy test-only rule: drop the draw after seeing it
        continue;
      }
    }
    OpenParent& p = open[parent];
    const int rank = static_cast<int>(p.drawn.size());
    p.drawn.push_back(token);
    const double child_log_survival = p.log_survival + log_p_hat(child_q, rank);
    const double child_survival = std::exp(child_log_survival);
    const int node = tree.add(token, parent, rank, child_q, static_cast<float>(child_survival));
    expected_tokens += child_survival;

    // Re-queue the parent under its next bound, or close it.
    int32_t next_token = -1;
    const double next_q = static_cast<int>(p.drawn.size()) < branch_cap ? next_remaining_q(p, &next_token) : 0;
    if (next_q > 0) {
      heap.push(Slot{p.log_survival + log_p_hat(next_q, static_cast<int>(p.drawn.size())), parent, true});
    } else {
      close(&p);
    }
    // The child's own slot (p is not used past this point: emplace_back may move it).
    open.emplace_back();
    open.back().log_survival = child_log_survival;
    if (tree.depth[node] < source.block_size) heap.push(Slot{child_log_survival, node, false});
  }
  return tree;
}

}  // namespace ts::spec
