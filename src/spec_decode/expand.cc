#include "spec_decode/expand.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "spec_decode/expand_testing.h"

namespace ts::spec_decode {

void validate_tree_params(const TreeParams& params) {
  TS_CHECK(params.mode != DecodeMode::None, "tree: mode None grows no tree");
  TS_CHECK(params.theta >= 0 && std::isfinite(params.theta), "tree: theta must be finite and >= 0, got ",
           params.theta);
  TS_CHECK(params.node_cap >= 0, "tree: node_cap must be >= 0, got ", params.node_cap);
  TS_CHECK(params.branch_cap >= 0, "tree: branch_cap must be >= 0, got ", params.branch_cap);
  TS_CHECK(params.draft_len >= 0, "tree: draft_len must be >= 0, got ", params.draft_len);
  TS_CHECK(params.temperature >= 0 && std::isfinite(params.temperature),
           "tree: draft temperature must be finite and >= 0, got ", params.temperature);
}

namespace {

// A node that may still get children. Its top list and draws live in the expansion's flat per-node arrays.
struct OpenParent {
  double log_survival = 0;
  int top_count = 0;    // tokens in its top list (q desc, index asc), once loaded
  int drawn_count = 0;  // children drawn so far
  int remaining = -1;   // sampling: index of its [vocab] buffer of remaining q in the pool, -1 = none
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
// sorted list: O(vocab) when count is small, no vocabulary-sized sort. top, top_q: [count]; returns how many
// were kept (min(count, vocab)).
int select_top(const float* probs, int vocab, int count, int32_t* top, double* top_q) {
  int kept = 0;
  float smallest_kept = 0;
  constexpr int kScan = 16;  // once the list is full, blocks with nothing above its smallest entry are skipped
  for (int32_t t = 0; t < vocab; ++t) {
    if (kept == count && t % kScan == 0 && t + kScan <= vocab) {
      bool any_above = false;  // a compare-and-or the compiler vectorises
      for (int k = 0; k < kScan; ++k) any_above |= probs[t + k] > smallest_kept;
      if (!any_above) {
        t += kScan - 1;
        continue;
      }
    }
    const float v = probs[t];
    if (kept == count && !(v > smallest_kept)) continue;  // ties keep the lower index
    int pos = kept < count ? kept++ : count - 1;            // the last entry drops out when full
    while (pos > 0 && probs[top[pos - 1]] < v) {
      top[pos] = top[pos - 1];
      --pos;
    }
    top[pos] = t;
    smallest_kept = probs[top[kept - 1]];
  }
  for (int i = 0; i < kept; ++i) top_q[i] = probs[top[i]];
  return kept;
}

// Sampling: the expected p_hat of a parent's next child, E[p_hat(q(x), rank, depth)] over x drawn from its remaining
// q r
// (r = q with the earlier children zeroed, normalised). This, not p_hat of the largest remaining q, is the slot's
// priority when children are sampled: the largest remaining q is what the draw gets only sometimes, and ranking
// by it overrates siblings, whose remaining mass is spread thin (the best-first trees of 4-8 nodes accepted less
// than a 5-node chain at T = 1 before). It is computed from r before the draw, so admission still never reads the
// value it admits. p_hat is tabulated over q's float bits (exponent + 4 mantissa bits, 16 steps per octave:
// each q is within 3% of its bin's centre), so the expectation is a look-up and a multiply-add per token.
class PHatTable {
 public:
  static constexpr int kShift = 19, kEntries = 1 << (31 - kShift);  // positive floats only: 4096 bins
  static int bin_of(float q) {
    uint32_t bits;
    std::memcpy(&bits, &q, 4);
    return int(bits >> kShift);
  }
  static float bin_centre(int i) {
    const uint32_t bits = (uint32_t(i) << kShift) | (1u << (kShift - 1));
    float q;
    std::memcpy(&q, &bits, 4);
    return q;
  }
  // clamped_logit(min(centre, 1)) of bins bin_of(1e-12) .. bin_of(1): what p_hat depends on (above: p_hat(1)).
  static const std::vector<double>& bin_logits() {
    static const std::vector<double> logits = [] {
      std::vector<double> l;
      for (int i = bin_of(1e-12f); i <= bin_of(1.0f); ++i)
        l.push_back(clamped_logit(std::min(double(bin_centre(i)), 1.0)));
      return l;
    }();
    return logits;
  }
  bool holds(const Calibration& c) const {
    if (!ready_) return false;
    for (int i = 0; i < kRankBuckets; ++i)
      if (c.rank_offset[i] != cal_.rank_offset[i]) return false;
    for (int i = 0; i < kDepthBuckets; ++i)
      if (c.depth_offset[i] != cal_.depth_offset[i]) return false;
    return c.a == cal_.a && c.b == cal_.b;
  }
  // Takes c; its rows are filled on first use (row()), so a calibration refitted online (calibration_online.h)
  // costs only the (rank, depth) rows its trees then read.
  void prepare(const Calibration& c) {
    if (holds(c)) return;
    cal_ = c;
    ready_ = true;
    table_.resize(size_t(kRows) * kEntries);
    row_filled_.fill(false);
  }
  // E[p_hat] of a draw from r ([vocab], >= 0, not normalised) for a child of this sibling rank and depth; 0 when r
  // has no mass.
  double expected(const float* r, int vocab, int rank, int depth) {
    const float* t = row(rank_bucket(rank), depth_bucket(depth));
    double weighted = 0, mass = 0;
    constexpr int kBlock = 256;  // float partial sums per block, double across blocks
    for (int b0 = 0; b0 < vocab; b0 += kBlock) {
      float wb = 0, mb = 0;
      for (int x = b0; x < std::min(vocab, b0 + kBlock); ++x) {
        uint32_t bits;
        std::memcpy(&bits, &r[x], 4);
        wb += r[x] * t[bits >> kShift];  // r[x] = +0 reads bin 0, weighted by 0
        mb += r[x];
      }
      weighted += wb, mass += mb;
    }
    return mass > 0 ? weighted / mass : 0.0;
  }

 private:
  static constexpr int kRows = kRankBuckets * kDepthBuckets;
  // The row of p_hat at each bin's centre for one (rank bucket, depth bucket), filled on first use.
  // p_hat is flat below the logit's clamp (1e-12) and above q = 1: only the ~640 bins between are evaluated, from
  // their centres' logits computed once per process, one exp each (4096 p_hat(q) a row otherwise).
  // Bins from bin_of(inf) on hold inf or NaN (exponent all ones): 1 (never read for a finite r).
  const float* row(int rank_group, int depth_group) {
    const int index = rank_group * kDepthBuckets + depth_group;
    float* row = &table_[size_t(index) * kEntries];
    if (row_filled_[index]) return row;
    const int rank = rank_group, depth = depth_group + 1;  // a rank and a depth in these buckets
    const std::vector<double>& logits = bin_logits();
    const int low = bin_of(1e-12f), non_finite = bin_of(std::numeric_limits<float>::infinity());
    const float below = float(cal_.p_hat(1e-13, rank, depth)), above = float(cal_.p_hat(1.0, rank, depth));
    for (int i = 0; i < kEntries; ++i) {
      const size_t j = size_t(i - low);
      row[i] = i < low             ? below
               : j < logits.size() ? float(cal_.p_hat_of_logit(logits[j], rank, depth))
               : i < non_finite    ? above
                                   : 1.0f;
    }
    row_filled_[index] = true;
    return row;
  }

  bool ready_ = false;
  Calibration cal_;
  std::vector<float> table_;                // [kRankBuckets * kDepthBuckets, kEntries] rows, see row()
  std::array<bool, kRows> row_filled_{};    // which rows of table_ hold cal_'s p_hat
};

// Uncalibrated priorities (p_hat = q): E[q(x)] for x drawn from r.
double expected_q(const float* r, int vocab) {
  double sq = 0, mass = 0;
  for (int x = 0; x < vocab; ++x) sq += double(r[x]) * r[x], mass += r[x];
  return mass > 0 ? sq / mass : 0.0;
}

// Expansion's work space, reused across calls on a thread so a round allocates nothing once warm.
struct ExpandScratch {
  std::vector<OpenParent> open;             // [tree size], indexed by node
  std::vector<int32_t> top, drawn;          // [node_cap + 1, branch_cap] per node: top tokens, drawn children
  std::vector<double> top_q;                // [node_cap + 1, branch_cap] their q
  std::vector<Slot> heap;                   // the slot max-heap (std::push_heap / pop_heap with SlotBelow)
  std::vector<float> probs;                 // [vocab] the q being loaded
  std::vector<std::vector<float>> marginal;  // [depth][vocab] Marginal q, computed once per depth
  std::vector<std::vector<float>> pool;     // sampling: [vocab] remaining-q buffers, one per open parent
  std::vector<int> free_buffers;            // indices into pool not held by a parent
  // Sampling: tabulated p_hat of the calibrations in use. Requests of different temperatures interleave on one
  // thread (the engine expands every request's tree), so a few are kept rather than rebuilt.
  std::array<PHatTable, 4> p_hat_tables;
  int next_table = 0;                       // the slot a calibration not held yet replaces
};

// Greedy trees are deterministic (each child is the largest remaining q), so choosing among prefixes of the
// admission order reads no draw: keep the one with the best expected tokens per ms of the round (ties: the
// smaller). Nodes are stored in admission order with parents first, so every prefix is a tree.
void keep_best_prefix(DraftTree& tree, const RoundCost& round_cost) {
  double expected = 1, best_rate = 0;
  int best_size = 1;
  for (int size = 1; size <= tree.size(); ++size) {
    if (size > 1) expected += tree.survival[size - 1];
    const double rate = expected / round_cost(size);
    if (rate > best_rate) best_rate = rate, best_size = size;
  }
  tree.token.resize(best_size);
  tree.parent.resize(best_size);
  tree.depth.resize(best_size);
  tree.sibling_rank.resize(best_size);
  tree.survival.resize(best_size);
  tree.draft_q.resize(best_size);
}

}  // namespace

namespace {

// One call of expand(): the best-first loop over the slot heap, with its work space. run() is the loop; each
// step either loads a parent's q (load_q) or admits and draws its next child (admit_child).
class Expansion {
 public:
  Expansion(const DraftSource& source, const TreeParams& params, const Calibration& calibration, Chooser& chooser,
            const RoundCost& round_cost, const std::function<bool(double)>* keep_draw)
      : source_(source), params_(params), calibration_(calibration), chooser_(chooser), round_cost_(round_cost),
        keep_draw_(keep_draw), vocab_(source.vocab), chain_(params.mode == DecodeMode::Chain),
        node_cap_(chain_ ? params.draft_len : params.node_cap), branch_cap_(chain_ ? 1 : params.branch_cap),
        calibrated_(reads_calibration(params.mode)), sampling_(params.temperature > 0),
        q_source_(params.mode == DecodeMode::Marginal ? QSource::Base : QSource::Conditional),
        log_theta_(chain_ ? -std::numeric_limits<double>::infinity() : std::log(params.theta)) {}

  DraftTree run(int32_t anchor);

 private:
  const DraftSource& source_;
  const TreeParams& params_;
  const Calibration& calibration_;
  Chooser& chooser_;
  const RoundCost& round_cost_;
  const std::function<bool(double)>* keep_draw_;
  const int vocab_;
  const bool chain_;
  const int node_cap_, branch_cap_;
  const bool calibrated_, sampling_;
  const QSource q_source_;
  const double log_theta_;

  DraftTree tree_;
  ExpandScratch& s_ = scratch();
  PHatTable* p_hat_table_ = nullptr;  // sampling with a calibrated priority
  double expected_tokens_ = 1;        // 1 + sum of survivals
  const SlotBelow below_{};

  static ExpandScratch& scratch() {
    thread_local ExpandScratch s;
    return s;
  }
  void prepare();
  // rank and depth are the child's sibling rank and depth, both known before the draw (0 for a parent's first
  // child; the parent's depth + 1).
  double log_p_hat(double q, int rank, int depth) const {
    return calibrated_ ? calibration_.log_p_hat(q, rank, depth) : std::log(q);
  }
  double log_next_p_hat(int node, double largest_q, int rank) const;
  void push(Slot slot) {
    s_.heap.push_back(slot);
    std::push_heap(s_.heap.begin(), s_.heap.end(), below_);
  }
  int32_t* top_of(int node) const { return &s_.top[size_t(node) * branch_cap_]; }
  double* top_q_of(int node) const { return &s_.top_q[size_t(node) * branch_cap_]; }
  int32_t* drawn_of(int node) const { return &s_.drawn[size_t(node) * branch_cap_]; }
  double next_remaining_q(int node, int32_t* token) const;
  void close(int node);
  void load_q(int32_t parent);
  void admit_child(int32_t parent);
};

void Expansion::prepare() {
  const size_t per_node = size_t(node_cap_ + 1) * branch_cap_;
  if (s_.top.size() < per_node) {
    s_.top.resize(per_node);
    s_.drawn.resize(per_node);
    s_.top_q.resize(per_node);
  }
  s_.open.assign(1, OpenParent{});
  s_.heap.clear();
  s_.probs.resize(vocab_);
  s_.marginal.resize(source_.block_size + 1);
  for (auto& m : s_.marginal) m.clear();
  s_.free_buffers.clear();
  for (int i = 0; i < int(s_.pool.size()); ++i) s_.free_buffers.push_back(i);
  if (sampling_ && calibrated_) {
    for (PHatTable& t : s_.p_hat_tables)
      if (t.holds(calibration_)) p_hat_table_ = &t;
    if (!p_hat_table_) {
      PHatTable& t = s_.p_hat_tables[s_.next_table];
      s_.next_table = (s_.next_table + 1) % int(s_.p_hat_tables.size());
      t.prepare(calibration_);
      p_hat_table_ = &t;
    }
  }
  const size_t n = size_t(node_cap_) + 1;  // the tree's arrays grow to at most node_cap + 1 entries
  tree_.token.reserve(n);
  tree_.parent.reserve(n);
  tree_.depth.reserve(n);
  tree_.sibling_rank.reserve(n);
  tree_.survival.reserve(n);
  tree_.draft_q.reserve(n);
}

// The log priority of a parent's next child (rank = children drawn so far, depth = the parent's + 1): greedy,
// p_hat of the largest remaining q (the child it will get); sampling, the expected p_hat of the draw (PHatTable).
double Expansion::log_next_p_hat(int node, double largest_q, int rank) const {
  const int depth = tree_.depth[node] + 1;
  if (!sampling_) return log_p_hat(largest_q, rank, depth);
  const float* r = s_.pool[s_.open[node].remaining].data();  // [vocab]
  const double e = calibrated_ ? p_hat_table_->expected(r, vocab_, rank, depth) : expected_q(r, vocab_);
  return e > 0 ? std::log(e) : -std::numeric_limits<double>::infinity();
}

// The largest q among the node's not-yet-drawn tokens (0 when none is left). After j < branch_cap draws one of
// top[0..j] is undrawn, so the top list holds the answer.
double Expansion::next_remaining_q(int node, int32_t* token) const {
  const OpenParent& p = s_.open[node];
  const int32_t* top = top_of(node);
  const int32_t* drawn = drawn_of(node);
  for (int i = 0; i < p.top_count; ++i) {
    bool was_drawn = false;
    for (int d = 0; d < p.drawn_count; ++d) was_drawn |= drawn[d] == top[i];
    if (!was_drawn) {
      *token = top[i];
      return top_q_of(node)[i];
    }
  }
  *token = -1;
  return 0.0;
}

void Expansion::close(int node) {
  OpenParent& p = s_.open[node];
  if (p.remaining >= 0) s_.free_buffers.push_back(p.remaining);
  p.remaining = -1;
  p.top_count = 0;
}

// Loads the parent's q, then re-queues it under its real bound (nothing is admitted yet).
void Expansion::load_q(int32_t parent) {
  const int child_depth = tree_.depth[parent] + 1;
  OpenParent& p = s_.open[parent];
  float* own = s_.probs.data();  // where this parent's q goes: sampling keeps it as the draws' weights
  if (sampling_) {
    if (s_.free_buffers.empty()) {
      s_.pool.emplace_back(vocab_);
      s_.free_buffers.push_back(int(s_.pool.size()) - 1);
    }
    p.remaining = s_.free_buffers.back();
    s_.free_buffers.pop_back();
    s_.pool[p.remaining].resize(vocab_);
    own = s_.pool[p.remaining].data();
  }
  const float* q = own;
  if (q_source_ == QSource::Base) {
    std::vector<float>& shared = s_.marginal[child_depth];
    if (shared.empty()) {
      shared.resize(vocab_);
      draft_probs_f32(source_, q_source_, child_depth, -1, params_.temperature, shared.data(), params_.filter);
    }
    q = shared.data();
    if (sampling_) std::copy(q, q + vocab_, own);  // drawn tokens are zeroed in the parent's own copy
  } else {
    draft_probs_f32(source_, q_source_, child_depth, tree_.token[parent], params_.temperature, own, params_.filter);
  }
  p.top_count = select_top(q, vocab_, branch_cap_, top_of(parent), top_q_of(parent));
  int32_t token = -1;
  const double next_q = next_remaining_q(parent, &token);
  if (next_q > 0) {
    push(Slot{p.log_survival + log_next_p_hat(parent, next_q, 0), parent, true});
  } else {
    close(parent);
  }
}

// Admitted. Now draw: sampled from the remaining q (the chooser normalises; verify() divides by the same sum, taken
// over the same floats in the same order), or greedily the largest remaining q, whose survival is the bound just
// admitted.
void Expansion::admit_child(int32_t parent) {
  int32_t token = -1;
  double child_q;
  {
    OpenParent& p = s_.open[parent];
    if (sampling_) {
      float* remaining = s_.pool[p.remaining].data();  // [vocab]
      token = chooser_.choose_f32(remaining, vocab_);
      child_q = remaining[token];
      remaining[token] = 0;
    } else {
      child_q = next_remaining_q(parent, &token);
    }
    if (sampling_ && keep_draw_ && !(*keep_draw_)(child_q)) {
      close(parent);  // the lossy test-only rule: drop the draw after seeing it
      return;
    }
  }
  OpenParent& p = s_.open[parent];
  const int rank = p.drawn_count;
  drawn_of(parent)[p.drawn_count++] = token;
  const double child_log_survival = p.log_survival + log_p_hat(child_q, rank, tree_.depth[parent] + 1);
  const double child_survival = std::exp(child_log_survival);
  const int node = tree_.add(token, parent, rank, child_q, static_cast<float>(child_survival));
  expected_tokens_ += child_survival;

  // Re-queue the parent under its next bound, or close it.
  int32_t next_token = -1;
  const double next_q = p.drawn_count < branch_cap_ ? next_remaining_q(parent, &next_token) : 0;
  if (next_q > 0) {
    push(Slot{p.log_survival + log_next_p_hat(parent, next_q, p.drawn_count), parent, true});
  } else {
    close(parent);
  }
  // The child's own slot (p is not used past this point: emplace_back may move it).
  s_.open.emplace_back();
  s_.open.back().log_survival = child_log_survival;
  if (tree_.depth[node] < source_.block_size) push(Slot{child_log_survival, node, false});
}

DraftTree Expansion::run(int32_t anchor) {
  tree_.q_source = q_source_;
  tree_.draft_temperature = params_.temperature;
  tree_.draft_filter = params_.filter;
  tree_.add(anchor, -1, 0, 1.0, 1.0f);
  if (node_cap_ == 0 || branch_cap_ == 0 || source_.block_size == 0) return std::move(tree_);
  prepare();
  push(Slot{0.0, 0, false});
  while (!s_.heap.empty() && tree_.size() - 1 < node_cap_) {
    std::pop_heap(s_.heap.begin(), s_.heap.end(), below_);
    const Slot slot = s_.heap.back();
    s_.heap.pop_back();
    if (slot.log_bound < log_theta_) break;  // every other slot's bound is no higher
    // The round-level price: only the slot's bound (known before any draw it admits) and the tree so far are read.
    if (!chain_ && round_cost_ &&
        !node_pays_ahead(round_cost_, tree_.size(), expected_tokens_, std::exp(slot.log_bound),
                         node_cap_ - (tree_.size() - 1)))
      break;
    if (slot.has_q) {
      admit_child(slot.node);
    } else {
      load_q(slot.node);
    }
  }
  if (!chain_ && !sampling_ && round_cost_) keep_best_prefix(tree_, round_cost_);
  return std::move(tree_);
}

DraftTree expand_impl(const DraftSource& source, int32_t anchor, const TreeParams& params,
                      const Calibration& calibration, Chooser& chooser, const RoundCost& round_cost,
                      const std::function<bool(double)>* keep_draw) {
  validate_tree_params(params);
  TS_CHECK(source.vocab > 0 && source.block_size >= 0, "tree: DraftSource needs vocab > 0 and block_size >= 0, got ",
           source.vocab, " and ", source.block_size);
  TS_CHECK(anchor >= 0 && anchor < source.vocab, "tree: anchor token ", anchor, " outside [0, ", source.vocab, ")");
  TS_CHECK(calibration.a > 0, "tree: calibration slope a must be > 0 (p_hat increasing in q), got ", calibration.a);
  return Expansion(source, params, calibration, chooser, round_cost, keep_draw).run(anchor);
}

}  // namespace

bool node_pays_ahead(const RoundCost& round_cost, int k, double expected_tokens, double next_survival,
                     int max_more) {
  TS_CHECK(k >= 1, "node_pays_ahead: the tree holds at least the anchor, got size ", k);
  const double now = round_cost(k);
  for (int m = 1; m <= max_more; ++m) {
    const double later = round_cost(k + m);
    if ((expected_tokens + m * next_survival) * now >= expected_tokens * later) return true;
  }
  return false;
}

DraftTree expand(const DraftSource& source, int32_t anchor, const TreeParams& params, const Calibration& calibration,
                 Chooser& chooser, const RoundCost& round_cost) {
  return expand_impl(source, anchor, params, calibration, chooser, round_cost, nullptr);
}

DraftTree expand_peeking_at_draws(const DraftSource& source, int32_t anchor, const TreeParams& params,
                                  const Calibration& calibration, Chooser& chooser,
                                  const std::function<bool(double drawn_q)>& keep_draw) {
  return expand_impl(source, anchor, params, calibration, chooser, {}, &keep_draw);
}

}  // namespace ts::spec_decode
