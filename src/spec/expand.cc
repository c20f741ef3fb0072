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

using QVector = std::vector<double>;  // [vocab]

// A node that may still get children.
struct OpenParent {
  double log_survival = 0;
  std::shared_ptr<const QVector> q;                // its children's q; null until its slot first reaches the top
  std::shared_ptr<const std::vector<int32_t>> top;  // its top-branch_cap tokens by q (q desc, index asc)
  std::vector<int32_t> drawn;                      // children drawn so far, in draw order
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

// The count largest tokens of q, ordered by (q desc, index asc), in one pass that keeps a small sorted list:
// O(vocab) when count is small, no vocabulary-sized sort.
void select_top(const QVector& q, int count, std::vector<int32_t>* top) {
  top->clear();
  const int vocab = static_cast<int>(q.size());
  for (int32_t t = 0; t < vocab; ++t) {
    const double v = q[t];
    if (static_cast<int>(top->size()) == count && !(v > q[top->back()])) continue;  // ties keep the lower index
    auto pos = top->end();
    while (pos != top->begin() && q[*(pos - 1)] < v) --pos;
    top->insert(pos, t);
    if (static_cast<int>(top->size()) > count) top->pop_back();
  }
}

// The largest q among the parent's not-yet-drawn tokens (0 when none is left). After j < branch_cap draws one of
// top[0..j] is undrawn, so top holds the answer.
double next_remaining_q(const OpenParent& p, int32_t* token) {
  for (int32_t t : *p.top) {
    bool drawn = false;
    for (int32_t d : p.drawn) drawn |= d == t;
    if (!drawn) {
      *token = t;
      return (*p.q)[t];
    }
  }
  *token = -1;
  return 0;
}

void release(OpenParent* p) {
  p->q.reset();
  p->top.reset();
}

}  // namespace

DraftTree expand(const DraftSource& source, int32_t anchor, const TreeParams& params, const Calibration& calibration,
                 Chooser& chooser) {
  validate_tree_params(params);
  TS_CHECK(source.vocab > 0 && source.block_size >= 0, "tree: DraftSource needs vocab > 0 and block_size >= 0, got ",
           source.vocab, " and ", source.block_size);
  TS_CHECK(anchor >= 0 && anchor < source.vocab, "tree: anchor token ", anchor, " outside [0, ", source.vocab, ")");
  TS_CHECK(calibration.a > 0, "tree: calibration slope a must be > 0 (p_hat increasing in q), got ", calibration.a);

  const bool chain = params.mode == TreeMode::Chain;
  const int node_cap = chain ? params.draft_len : params.node_cap;
  const int branch_cap = chain ? 1 : params.branch_cap;
  const bool calibrated = params.mode == TreeMode::Tree || chain;
  const bool sampling = params.temperature > 0;
  const QSource q_source = params.mode == TreeMode::Marginal ? QSource::Base : QSource::Conditional;
  const auto log_p_hat = [&](double q) { return calibrated ? calibration.log_p_hat(q) : std::log(q); };
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
  // Marginal q depends only on the depth: one per depth, shared by every parent there.
  std::vector<std::shared_ptr<const QVector>> marginal_q(source.block_size + 1);
  std::vector<std::shared_ptr<const std::vector<int32_t>>> marginal_top(source.block_size + 1);
  std::vector<float> logits_scratch;  // [vocab]
  QVector q_j;                        // [vocab] the current draw's without-replacement distribution
  double expected_tokens = 1;         // 1 + sum of survivals

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
    int32_t next_token = -1;
    if (!slot.has_q) {  // load the parent's q, then re-queue it under its real bound (nothing is admitted yet)
      OpenParent& p = open[parent];
      const int child_depth = tree.depth[parent] + 1;
      if (q_source == QSource::Base && marginal_q[child_depth]) {
        p.q = marginal_q[child_depth];
        p.top = marginal_top[child_depth];
      } else {
        auto q = std::make_shared<QVector>();
        auto top = std::make_shared<std::vector<int32_t>>();
        draft_distribution(source, q_source, child_depth, tree.token[parent], params.temperature, &logits_scratch,
                           q.get());
        select_top(*q, branch_cap, top.get());
        p.q = q;
        p.top = top;
        if (q_source == QSource::Base) {
          marginal_q[child_depth] = p.q;
          marginal_top[child_depth] = p.top;
        }
      }
      const double next_q = next_remaining_q(p, &next_token);
      if (next_q > 0) {
        heap.push(Slot{p.log_survival + log_p_hat(next_q), parent, true});
      } else {
        release(&p);
      }
      continue;
    }

    // Admitted. Now draw.
    int32_t child;
    {
      OpenParent& p = open[parent];
      if (sampling) {
        remove_drawn(*p.q, p.drawn, &q_j);
        child = chooser.choose(q_j.data(), source.vocab);
      } else {
        next_remaining_q(p, &child);  // the largest remaining q: survival == the bound just admitted
      }
    }
    const double child_q = (*open[parent].q)[child];
    if (sampling && params.peek_admission_for_negative_test && !params.peek_admission_for_negative_test(child_q)) {
      release(&open[parent]);  // the lossy test-only rule: drop the draw after seeing it
      continue;
    }
    OpenParent& p = open[parent];
    const int rank = static_cast<int>(p.drawn.size());
    p.drawn.push_back(child);
    const double child_log_survival = p.log_survival + log_p_hat(child_q);
    const double child_survival = std::exp(child_log_survival);
    const int node = tree.add(child, parent, rank, child_q, static_cast<float>(child_survival));
    expected_tokens += child_survival;

    // Re-queue the parent under its next bound, or close it.
    const double next_q = static_cast<int>(p.drawn.size()) < branch_cap ? next_remaining_q(p, &next_token) : 0;
    if (next_q > 0) {
      heap.push(Slot{p.log_survival + log_p_hat(next_q), parent, true});
    } else {
      release(&p);
    }
    // The child's own slot (p is not used past this point: emplace_back may move it).
    open.emplace_back();
    open.back().log_survival = child_log_survival;
    if (tree.depth[node] < source.block_size) heap.push(Slot{child_log_survival, node, false});
  }
  return tree;
}

}  // namespace ts::spec
