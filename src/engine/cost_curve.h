// Measuring L(b, k): the wall-clock cost of one target forward of k tokens per sequence at batch b over a context.
// The load-adaptive theta (engine/cost_model.h) prices a tree node with this curve; `treespark bench forward`
// prints it.
#pragma once

#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/target_model.h"
#include "engine/cost_model.h"

namespace ts {

// Token counts per sequence at which the adaptive policy's curve is measured: every k up to 8 and densely to 16. The
// GEMMs' register tiles make L(b, k) a staircase in the rows b * k (flat while the rows fit one tile, then a step), and
// pricing a node by interpolating between k = 4 and k = 8 put the step in the wrong place: it overpriced the 4th node,
// and the adaptive tree stopped a node short of the best fixed one (docs/results/optimization-notes.md, "Cost curve:
// every k up to 8"). Small k are cheap to measure; the large ones dominate the time.
std::vector<int> policy_token_counts();

struct CostCurveOptions {
  int context = 512;                          // committed tokens per sequence before the timed forwards
  std::vector<int> ks = {1, 2, 4, 8, 16, 32, 64};
  std::vector<int> batches = {1};
  int reps = 5;                               // timed runs per point after one warm-up; the median is kept
  // Make each batch's row non-decreasing in k (pool-adjacent-violators: a noisy dip is averaged with its
  // neighbours). A forward of more tokens never costs less; a dip would price the next node below nothing.
  bool monotone = false;
  // Also fit the context term (CostModel::context and its two slopes): at batch 1, k = 1 and the largest k timed
  // at `context` and at this longer context, alternated. 0 (or not above context): no term.
  int long_context = 0;
};

// Commits `tokens` tokens (ids (i * 7919 + salt) % vocab, positions 0, 1, ...) to an empty cache, in prefill chunks
// of 128: the context the cost measurements run their forwards over.
void fill_context(TargetModel& model, KVCache& cache, int tokens, int salt);

// In place: each batch's costs, as a function of k, replaced by their least-squares non-decreasing fit.
void make_monotone_in_k(CostModel& cost);

// Timed forwards leave the caches as they were (their rows are dropped).
CostModel measure_cost_curve(TargetModel& model, const CostCurveOptions& options);

// Median ms of one drafter block forward over a context of `context` tokens: the part of a round's cost that
// does not grow with the tree (CostModel::fixed_ms).
double measure_draft_ms(Drafter& drafter, int context, int reps = 5);

// Median ms of ONE batched drafter forward (Drafter::draft_blocks) over b blocks, each over a context of `context`
// tokens, for every b in batches: the fixed cost F(b) of a serving round (CostModel::fixed_ms_by_batch).
std::vector<double> measure_draft_ms_by_batch(Drafter& drafter, int context, const std::vector<int>& batches,
                                              int reps = 3);

// What a server measures at start-up: L(b, k) at batches x ks plus F(b) when there is a drafter. A few seconds on
// the shipped pair with the defaults below.
struct ServingCostOptions {
  int context = 256;
  int long_context = 1024;  // the context term's second context (clamped to the model's positions)
  std::vector<int> ks = policy_token_counts();
  std::vector<int> batches = {1, 2, 4, 8, 16};
  int reps = 3;
};
CostModel measure_serving_cost(TargetModel& target, Drafter* drafter, const ServingCostOptions& options);

// The cost model as JSON, to measure once and load at start-up:
//   {"version": 1, "batches": [..], "tokens": [..], "ms": [[L(b0, k0), ..], ..], "fixed_ms": F,
//    "fixed_ms_by_batch": [..], "context": c, "ms_per_context_seq": s, "ms_per_context_row": r}
// (the last three optional: a file without them prices every context as the curve's own).
// Reading validates the model (CostModel::validate) and names what is missing.
std::string cost_model_to_json(const CostModel& cost);
CostModel cost_model_from_json(const std::string& text);
CostModel read_cost_model(const std::string& path);
void write_cost_model(const std::string& path, const CostModel& cost);

}  // namespace ts
