// Per-request correction of the offline calibration from the request's own verification labels.
//
// The offline fit (calibration.h, `treespark calibrate`) is one (a, b, rank and depth offsets) per pair and
// temperature, fitted on one prompt set. A request whose text is easier or harder for the drafter than that set gets
// p_hat that is systematically off, and the cost-priced tree then buys nodes for survival that is not there, to the
// point of running slower than the target alone: on the README's code prompt, for one, first children are accepted less
// often than the offline T = 0 entry says and later siblings more often (the drafter's second guess is often the
// target's). Every round's verification labels its edges for free (verify.h), so the request refits what it can afford
// to from them: one shift of the logit per sibling-rank bucket,
//     p_hat = sigmoid(a * logit(q) + b + rank_offset[bucket] + depth_offset[depth bucket] + shift[bucket]),
// each the maximum a-posteriori shift on that bucket's edges among the last kWindow, under a Gaussian prior centred at
// 0 (the offline fit) with precision kPriorPrecision (about 4 * kPriorPrecision edges of evidence outweigh it). The
// buckets' edges are disjoint, so the shifts are four independent one-dimensional fits. With it the predictions come
// close to what is accepted and the same prompt gains from speculation (docs/results/optimization-notes.md, "Online
// calibration: per-request shifts"). Only labels of rounds already verified enter, so the tree of a round depends on
// the past alone and verification stays lossless (the admission rule never reads the draw it admits;
// docs/verification.md, rule 1).
// The calibration in use moves only when a fitted shift has moved kPublishStep from it: sampled expansion
// tabulates p_hat per calibration (expand.cc, PHatTable), which a new value every round would rebuild every round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "spec_decode/calibration.h"

namespace ts::spec_decode {

class OnlineCalibration {
 public:
  static constexpr int kWindow = 1024;             // edges the shifts are fitted on: the newest ones
  static constexpr double kPriorPrecision = 4.0;   // in units of Fisher information (one edge at p = 1/2: 1/4)
  static constexpr double kMaxShift = 8.0;         // |shift| bound: keeps p_hat off exact 0 / 1 on one-sided data
  static constexpr double kPublishStep = 0.1;      // logits: p_hat in use is within ~2.5% of the fit (relative)

  OnlineCalibration() = default;
  explicit OnlineCalibration(const Calibration& prior) : prior_(prior), current_(prior) {}

  // Adds one round's edge records (VerifyResult::edges) and refits the shifts (a few Newton steps from the last).
  void observe(const std::vector<EdgeRecord>& edges);

  // The prior with each bucket's published shift added (rank_offset[0] stays 0: bucket 0's shift goes into b).
  const Calibration& current() const { return current_; }
  const Calibration& prior() const { return prior_; }
  double shift(int bucket = 0) const { return shift_[bucket]; }                  // the latest fit
  double published_shift(int bucket = 0) const { return published_[bucket]; }  // the one current() carries
  int64_t edges_seen() const { return edges_seen_; }

 private:
  struct Edge {
    double prior_z;  // the prior's linear term: a * logit(q) + b + rank_offset + depth_offset
    uint8_t accepted;
    uint8_t bucket;  // rank_bucket(sibling_rank)
  };
  Calibration prior_, current_;
  std::vector<Edge> window_;  // [<= kWindow] ring buffer
  size_t next_ = 0;           // ring position of the next write once window_ is full
  double shift_[kRankBuckets] = {}, published_[kRankBuckets] = {};
  int64_t edges_seen_ = 0;
};

}  // namespace ts::spec_decode
