// Measuring L(b, k): the wall-clock cost of one target forward of k tokens per sequence at batch b over a context.
// The load-adaptive theta (spec/theta_policy.h) prices a tree node with this curve; `treespark bench forward`
// prints it.
#pragma once

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

}  // namespace ts
