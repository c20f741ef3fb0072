// Calibrated edge survival:
//     p_hat(edge) = sigmoid(a * logit(q) + b + rank_offset[rank_bucket] + depth_offset[depth_bucket]),
// the probability that a drafted child is accepted given that its parent was, as a function of the drafter's q for
// that child, its sibling rank and its depth.
//
// Labels come from verification (verify.h, VerifyResult::edges): every child of every node on the accepted
// path (the root included) gets one record; label 1 iff that child was accepted. This is the same rule in greedy
// and sampling mode. In sampling mode it includes siblings after the accepted one, which were never tested: they
// get label 0, because p_hat must estimate P(child accepted | parent accepted) unconditionally on its siblings so
// that a node's survival (the product along its path) is the probability that the node is accepted and
// 1 + sum of survivals is the expected number of tokens a round emits (which the theta policy relies on).
// Children of rejected nodes get no record (their parent was never reached).
//
// Fitting: logistic regression of the label on x = logit(q) and the rank and depth buckets (one-hot), by Newton's
// method with a tiny ridge (1e-3) pulling (a, b, offsets) toward the uncalibrated (1, 0, 0), which keeps separable
// or one-sided data (or an empty bucket) finite. a is clamped to >= 1e-3 so
// that p_hat stays increasing in q (tree expansion bounds a parent's next child by the largest remaining q).
// q is clamped to [1e-12, 1 - 1e-12] before the logit.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace ts::spec_decode {

// Sibling ranks share offsets from kRankBuckets - 1 on: rank 0 (the first child drawn, offset 0), 1, 2, >= 3.
//
// Why an offset per sibling rank: when children are sampled, whether the j-th sibling is accepted depends mostly on
// whether an earlier sibling already was (then it is not) and on how far p is from q, hardly on the sibling's own
// q. A fit on logit(q) alone is then nearly flat (a ~ 0.05 at T = 1 on the shipped pair), every sibling looks as
// good as the first, and best-first grows shallow bushy trees. The offset lets later siblings be priced lower.
// The rank of the next child is known before it is drawn, so admission still never reads the draw's value.
constexpr int kRankBuckets = 4;
inline int rank_bucket(int sibling_rank) { return sibling_rank < kRankBuckets - 1 ? sibling_rank : kRankBuckets - 1; }

// Child depths share offsets from kDepthBuckets on: depth 1 (a child of the root, offset 0), 2, 3, >= 4.
//
// Why an offset per depth: a deeper node's q comes from a drafter position further from the context it saw, and
// its acceptance falls with depth at the same q (at T = 1 on the shipped pair first children are accepted 70% of
// the time at depth 1, 58% at depths 2-3, while a fit without depth predicted 65% everywhere), so without it deep
// nodes are overvalued and best-first grows chains too long. A child's depth (its parent's + 1) is known before
// it is drawn, so admission still never reads the draw's value. Depth 0 (no such edge; old records) counts as 1.
constexpr int kDepthBuckets = 4;
inline int depth_bucket(int depth) { return depth <= 1 ? 0 : depth < kDepthBuckets ? depth - 1 : kDepthBuckets - 1; }

struct Calibration {
  double a = 1, b = 0;  // the defaults make p_hat(q) = q: the uncalibrated log-q priority
  double rank_offset[kRankBuckets] = {0, 0, 0, 0};    // added to the logit; [0] is always 0
  double depth_offset[kDepthBuckets] = {0, 0, 0, 0};  // added to the logit; [0] (depth 1) is always 0
  // The logit's offset for a child of this sibling rank and depth.
  double offset(int sibling_rank, int depth) const {
    return rank_offset[rank_bucket(sibling_rank)] + depth_offset[depth_bucket(depth)];
  }
  // p_hat = sigmoid(a * logit(q) + b + offset(sibling_rank, depth)). depth defaults to 1 (no depth offset) for
  // callers that price a single edge out of any tree; tree expansion always passes the child's depth.
  double p_hat(double q, int sibling_rank = 0, int depth = 1) const;
  double p_hat_of_logit(double logit_q, int sibling_rank = 0, int depth = 1) const;  // given clamped_logit(q)
  double log_p_hat(double q, int sibling_rank = 0, int depth = 1) const;  // log(p_hat), computed stably
};

double clamped_logit(double q);  // logit(clamp(q, 1e-12, 1 - 1e-12))

struct EdgeRecord {
  double logit_q = 0;    // clamped_logit(q) of the child's token under its parent's q
  uint8_t accepted = 0;  // 1 iff the child was accepted
  int32_t depth = 0;     // the child's depth (1..block_size)
  int32_t sibling_rank = 0;
};

// Logistic regression of accepted on logit_q and the sibling-rank and depth buckets; no records gives the defaults.
Calibration fit_calibration(const std::vector<EdgeRecord>& records);

// Expected calibration error with kEceBins equal-width bins of p_hat over [0, 1]:
// sum over bins of (count / N) * |mean p_hat - mean label|. 0 for no records.
constexpr int kEceBins = 10;
double expected_calibration_error(const std::vector<EdgeRecord>& records, const Calibration& calibration);

// The same ECE on each depth bucket's records alone ([kDepthBuckets]; 0 for a bucket without records), and how many
// records each bucket has: whether deep nodes are priced right, which the ECE over all edges (mostly shallow ones)
// hides.
struct DepthEce {
  std::array<double, kDepthBuckets> ece{};
  std::array<int64_t, kDepthBuckets> edges{};
};
DepthEce expected_calibration_error_by_depth(const std::vector<EdgeRecord>& records, const Calibration& calibration);

}  // namespace ts::spec_decode
