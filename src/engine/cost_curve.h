// Measuring L(b, k): the wall-clock cost of one target forward of k tokens per sequence at batch b over a context.
// The load-adaptive theta (spec/theta_policy.h) prices a tree node with this curve; `treespark bench forward`
// prints it.
#pragma once

#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/target_model.h"
#include "spec/theta_policy.h"

namespace ts {

struct CostCurveOptions {
  int context = 512;                          // committed tokens per sequence before the timed forwards
  std::vector<int> ks = {1, 2, 4, 8, 16, 32, 64};
  std::vector<int> batches = {1};
  int reps = 5;                               // timed runs per point after one warm-up; the median is kept
};

// Timed forwards leave the caches as they were (their rows are dropped).
spec::CostModel measure_cost_curve(TargetModel& model, const CostCurveOptions& options);

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
  std::vector<int> ks = {1, 2, 4, 8, 16, 32};
  std::vector<int> batches = {1, 2, 4, 8, 16};
  int reps = 3;
};
spec::CostModel measure_serving_cost(TargetModel& target, Drafter* drafter, const ServingCostOptions& options);

// The cost model as JSON, to measure once and load at start-up:
//   {"version": 1, "batches": [..], "tokens": [..], "ms": [[L(b0, k0), ..], ..], "fixed_ms": F,
//    "fixed_ms_by_batch": [..]}
// Reading validates the model (CostModel::validate) and names what is missing.
std::string cost_model_to_json(const spec::CostModel& cost);
spec::CostModel cost_model_from_json(const std::string& text);
spec::CostModel read_cost_model(const std::string& path);
void write_cost_model(const std::string& path, const spec::CostModel& cost);

}  // namespace ts
