#include "spec_decode/calibration_online.h"

#include <algorithm>
#include <cmath>

namespace ts::spec_decode {

namespace {

// In float: the shifts need ~1e-3 of accuracy (the calibration in use moves in kPublishStep = 0.1 steps), and a float
// exp makes a pass over the window cheaper (docs/results/optimization-notes.md, "Online calibration: float sigmoid").
float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-std::clamp(z, -60.0f, 60.0f))); }

}  // namespace

void OnlineCalibration::observe(const std::vector<EdgeRecord>& edges) {
  if (edges.empty()) return;
  for (const EdgeRecord& r : edges) {
    const int bucket = rank_bucket(r.sibling_rank);
    // The prior's depth offset is part of the fixed term: the shifts stay per rank bucket, on top of it.
    const Edge e{prior_.a * r.logit_q + prior_.b + prior_.offset(r.sibling_rank, r.depth), r.accepted,
                 uint8_t(bucket)};
    if (window_.size() < size_t(kWindow)) {
      window_.push_back(e);
    } else {
      window_[next_] = e;
      next_ = (next_ + 1) % window_.size();
    }
  }
  edges_seen_ += int64_t(edges.size());
  // Per bucket, maximise sum log P(label | prior_z + s) - kPriorPrecision / 2 * s^2: concave in s, so Newton from
  // the last shift converges in a few steps (the window moved by one round's edges). All buckets in one pass.
  double s[kRankBuckets];
  std::copy(shift_, shift_ + kRankBuckets, s);
  bool moving = true;
  for (int iter = 0; iter < 8 && moving; ++iter) {
    double gradient[kRankBuckets], curvature[kRankBuckets];
    for (int k = 0; k < kRankBuckets; ++k) gradient[k] = -kPriorPrecision * s[k], curvature[k] = kPriorPrecision;
    for (const Edge& e : window_) {
      const double p = sigmoid(float(e.prior_z + s[e.bucket]));
      gradient[e.bucket] += e.accepted - p;
      curvature[e.bucket] += p * (1 - p);
    }
    moving = false;
    for (int k = 0; k < kRankBuckets; ++k) {
      const double step = gradient[k] / curvature[k];
      s[k] = std::clamp(s[k] + step, -kMaxShift, kMaxShift);
      // Newton converges quadratically: after a step below 0.01 the next would be ~1e-4, far below kPublishStep, so one
      // pass over the window per round is the rule once the fit tracks (microseconds per round).
      moving |= std::abs(step) >= 1e-2;
    }
  }
  bool publish = false;
  for (int k = 0; k < kRankBuckets; ++k) {
    shift_[k] = s[k];
    publish |= std::abs(shift_[k] - published_[k]) >= kPublishStep;
  }
  if (publish) {
    std::copy(shift_, shift_ + kRankBuckets, published_);
    current_ = prior_;
    current_.b = prior_.b + published_[0];
    for (int k = 1; k < kRankBuckets; ++k)
      current_.rank_offset[k] = prior_.rank_offset[k] + published_[k] - published_[0];
  }
}

}  // namespace ts::spec_decode
