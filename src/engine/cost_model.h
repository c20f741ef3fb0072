// The measured cost model and its prices. Load-adaptive theta: how much survival a new tree node must have to pay for the extra verification work.
//
// A round that verifies k tokens per sequence (anchor + k - 1 tree nodes) at batch b costs L(b, k) ms and emits
// E = 1 + sum of the nodes' survivals tokens in expectation. Adding a node of survival s changes the rate of
// emitted tokens per ms from E / L(b, k) to (E + s) / L(b, k + 1), which is no worse iff
//     s >= (L(b, k + 1) - L(b, k)) * E / (L(b, k) + F)   (marginal cost over current cost per expected token),
// where F = CostModel::fixed_ms is the round's cost outside the target forward.
// On a memory-bound target L barely grows with k, so the threshold is near 0 and the tree grows; as the batch
// grows the forward becomes compute-bound, L(b, k) -> c * k (linear through 0), the threshold tends to E / k,
// which is 1 for the first node and stays close to 1 while survivals are high: the tree shrinks toward the chain.
// The engine prices each round's expansion with round_cost_ms below (spec_decode/expand.h: RoundCost,
// node_pays_ahead), and the scheduler prices whole steps with step_cost_ms.
#pragma once

#include <vector>

namespace ts {

// Measured L(batch, k): ms of one target forward of k tokens per sequence at that batch size.
struct CostModel {
  std::vector<int> batches;  // [B], strictly increasing, >= 1
  std::vector<int> tokens;   // [K], strictly increasing, >= 1, K >= 2
  std::vector<double> ms;    // [B, K], row-major: ms[i * K + j] = L(batches[i], tokens[j]), > 0
  // Per-round cost outside the target forward (the drafter's forward, bookkeeping), >= 0. A round then costs
  // L(b, k) + fixed_ms, and the threshold below divides by that: the cheaper the verify forward is relative to
  // the whole round, the more nodes pay for themselves.
  double fixed_ms = 0;
  // Optional, per measured batch: the round's fixed cost at that batch (the drafter's one batched forward over b
  // blocks). [B] or empty; when set it replaces fixed_ms. Interpolated in the batch like the curve.
  std::vector<double> fixed_ms_by_batch;
  // Optional context term. `ms` is measured at `context` committed tokens per sequence (0: unknown, no term). A
  // forward over a longer context pays attention over the extra keys: per sequence, ms_per_context_seq per
  // context token for its first row (streaming its K/V) and ms_per_context_row more per token for each further
  // row (the dot products), so
  //   L(b, k, ctx) = L(b, k) + b * (ctx - context) * (ms_per_context_seq + ms_per_context_row * (k - 1)),
  // which is linear in k and in ctx as attention is (measured at batch 1, two contexts: cost_curve.h). Without
  // it a curve measured at 256 tokens prices a node at 900 at half its cost and grows trees too big there.
  // Only contexts longer than `context` are priced up; shorter ones keep the curve's own costs (a fitted slope
  // extrapolated down could price an extra row below nothing).
  int context = 0;
  double ms_per_context_seq = 0, ms_per_context_row = 0;  // >= 0

  // Throws ts::Error unless the shapes and orders above hold.
  void validate() const;
  // Piecewise linear in k (extrapolated with the last segment's slope beyond the table, the first below it) and
  // in the batch between measured batches (clamped to the first/last measured batch outside them).
  double cost_ms(int batch, int k) const;
  // The same at k tokens per sequence (fractional: interpolated between whole k) and `ctx` committed tokens per
  // sequence (the context term above; ctx <= context or no term: the curve alone).
  double cost_ms(int batch, double k, double ctx) const;
  // The round's fixed cost at this batch: fixed_ms_by_batch interpolated, else fixed_ms.
  double fixed_cost_ms(int batch) const;
};

// The threshold above for a tree whose verify forward currently holds tree_size_so_far tokens per sequence (the
// anchor counts: a root-only tree has 1) and emits expected_tokens_so_far = 1 + sum of survivals. Never negative.
// The fixed cost is fixed_cost_ms(batch).
// ctx: the request's committed tokens (the context term; < 0: priced at the curve's own context).
double adaptive_theta(const CostModel& cost, int batch, int tree_size_so_far, double expected_tokens_so_far,
                      double ctx = -1);

// The cost of a round that verifies k tokens per sequence (anchor included), the per-node work outside the forward
// (tree growth, the verification walk, KV compaction; node_ms per node) included:
//   C(k) = L(batch, k, ctx) + F(batch) + node_ms * (k - 1).
double round_cost_ms(const CostModel& cost, int batch, int k, double ctx = -1, double node_ms = 0);

// Whether speculating pays at this batch: a round with k tokens per sequence (anchor included) that emits
// expected_tokens tokens gives expected_tokens / (L(b, k) + F(b)) tokens per ms per sequence; plain decoding gives
// 1 / L(b, 1). True iff the first is at least the second (the serving policy switches speculation off otherwise).
bool speculation_pays(const CostModel& cost, int batch, int k, double expected_tokens, double ctx = -1);

// The modelled cost of one serving step: `batch` sequences run `rows` target rows in all (rows / batch per
// sequence, interpolated between whole k) and `drafting` of them ran the batched drafter forward:
//   L(batch, rows / batch, ctx) + (drafting > 0 ? fixed_cost_ms(drafting) : 0), ctx the sequences' mean context.
// The scheduler chooses which requests speculate by this price (scheduler.h); bench engine prices steps with it.
double step_cost_ms(const CostModel& cost, int batch, double rows, int drafting, double ctx = -1);

}  // namespace ts
