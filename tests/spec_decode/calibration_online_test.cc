// OnlineCalibration: the per-request logit shifts (one per sibling-rank bucket) recover a known miscalibration of
// the prior, follow a change of regime through their window, stay finite on one-sided labels, lean on the prior
// with little evidence, and move the calibration in use only in kPublishStep steps.
#include <gtest/gtest.h>

#include <cmath>

#include "sampling/chooser.h"
#include "spec_decode/calibration_online.h"

namespace ts::spec_decode {
namespace {

double sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

// One round's edges: q spread over (0.01, 0.99), ranks 0..3, labels drawn from the prior's p_hat shifted by
// true_shift in the logit.
std::vector<EdgeRecord> round_edges(const Calibration& prior, double true_shift, int n, RandomChooser& rng) {
  std::vector<EdgeRecord> edges;
  for (int i = 0; i < n; ++i) {
    EdgeRecord r;
    r.logit_q = clamped_logit(0.01 + 0.98 * rng.uniform());
    r.sibling_rank = i % 4;
    r.depth = 1 + i % 3;
    const double z = prior.a * r.logit_q + prior.b + prior.rank_offset[rank_bucket(r.sibling_rank)];
    r.accepted = rng.uniform() < sigmoid(z + true_shift);
    edges.push_back(r);
  }
  return edges;
}

Calibration shipped_like_prior() {
  Calibration c;
  c.a = 0.99, c.b = 2.18;
  c.rank_offset[1] = -1.59, c.rank_offset[2] = -0.98, c.rank_offset[3] = -1.79;
  return c;
}

TEST(OnlineCalibration, StartsAtThePrior) {
  const Calibration prior = shipped_like_prior();
  OnlineCalibration online(prior);
  online.observe({});
  EXPECT_EQ(online.shift(), 0);
  EXPECT_EQ(online.edges_seen(), 0);
  EXPECT_EQ(online.current().b, prior.b);
  EXPECT_EQ(online.current().a, prior.a);
}

TEST(OnlineCalibration, RecoversAKnownShift) {
  for (double true_shift : {-1.5, -0.5, 0.0, 0.7}) {
    const Calibration prior = shipped_like_prior();
    OnlineCalibration online(prior);
    RandomChooser rng(7);
    for (int round = 0; round < 200; ++round) online.observe(round_edges(prior, true_shift, 8, rng));
    // 1024 edges in the window, ~256 per bucket: each bucket's MAP estimate has a standard error of ~0.15 here
    // and is pulled toward 0 by at most ~10%.
    for (int k = 0; k < kRankBuckets; ++k) EXPECT_NEAR(online.shift(k), true_shift, 0.45) << true_shift << " " << k;
    EXPECT_NEAR(online.current().b - prior.b, online.shift(), OnlineCalibration::kPublishStep) << true_shift;
    EXPECT_EQ(online.current().a, prior.a);
    EXPECT_EQ(online.current().rank_offset[0], 0);
    for (int k = 1; k < kRankBuckets; ++k)
      EXPECT_NEAR(online.current().rank_offset[k],
                  prior.rank_offset[k] + online.published_shift(k) - online.published_shift(0), 1e-12);
  }
}

// The prior's depth offsets are part of what the shifts correct from: labels that follow the prior (depth
// included) leave every shift near 0, and the calibration in use keeps the prior's depth offsets.
TEST(OnlineCalibration, KeepsThePriorsDepthOffsets) {
  Calibration prior = shipped_like_prior();
  prior.depth_offset[1] = -1.2, prior.depth_offset[2] = -1.8, prior.depth_offset[3] = -2.5;
  OnlineCalibration online(prior);
  RandomChooser rng(13);
  for (int round = 0; round < 200; ++round) {
    std::vector<EdgeRecord> edges;
    for (int i = 0; i < 8; ++i) {
      EdgeRecord r;
      r.logit_q = clamped_logit(0.01 + 0.98 * rng.uniform());
      r.sibling_rank = i % 4;
      r.depth = 1 + (round + i) % 5;
      r.accepted = rng.uniform() < prior.p_hat_of_logit(r.logit_q, r.sibling_rank, r.depth);
      edges.push_back(r);
    }
    online.observe(edges);
  }
  // ~256 edges per bucket: a standard error of ~0.15; a fit that ignored the depth offsets would shift by ~-1.
  for (int k = 0; k < kRankBuckets; ++k) EXPECT_NEAR(online.shift(k), 0, 0.45) << k;
  for (int k = 0; k < kDepthBuckets; ++k) EXPECT_EQ(online.current().depth_offset[k], prior.depth_offset[k]) << k;
}

TEST(OnlineCalibration, FollowsAChangeOfRegimeThroughItsWindow) {
  const Calibration prior = shipped_like_prior();
  OnlineCalibration online(prior);
  RandomChooser rng(11);
  for (int round = 0; round < 100; ++round) online.observe(round_edges(prior, 1.0, 10, rng));
  EXPECT_GT(online.shift(), 0.6);
  // More than a window of edges from the new regime: the old one has left the window.
  for (int round = 0; round < 120; ++round) online.observe(round_edges(prior, -1.0, 10, rng));
  for (int k = 0; k < kRankBuckets; ++k) EXPECT_NEAR(online.shift(k), -1.0, 0.45) << k;
}

TEST(OnlineCalibration, LeansOnThePriorWithLittleEvidence) {
  Calibration prior;  // p_hat = q
  OnlineCalibration online(prior);
  // Four accepted edges at q = 1/2: the maximum-likelihood shift is +infinity; the prior keeps it small.
  std::vector<EdgeRecord> edges(4, EdgeRecord{0.0, 1, 1, 0});
  online.observe(edges);
  EXPECT_GT(online.shift(), 0.05);
  EXPECT_LT(online.shift(), 0.6);  // 4 * (1 - sigmoid(s)) = kPriorPrecision * s  ->  s ~ 0.4
  EXPECT_NEAR(4 * (1 - sigmoid(online.shift())), OnlineCalibration::kPriorPrecision * online.shift(), 1e-3);
  for (int k = 1; k < kRankBuckets; ++k) EXPECT_EQ(online.shift(k), 0) << k;  // no evidence, no move
}

TEST(OnlineCalibration, OneSidedLabelsStayFinite) {
  for (uint8_t label : {uint8_t(0), uint8_t(1)}) {
    OnlineCalibration online(shipped_like_prior());
    std::vector<EdgeRecord> edges(64, EdgeRecord{clamped_logit(0.3), label, 1, 0});
    for (int round = 0; round < 20; ++round) online.observe(edges);
    EXPECT_TRUE(std::isfinite(online.shift()));
    EXPECT_LE(std::abs(online.shift()), OnlineCalibration::kMaxShift);
    const double p = online.current().p_hat(0.3);
    EXPECT_GT(p, 0);
    EXPECT_LT(p, 1);
    if (label == 0) EXPECT_LT(p, 0.05); else EXPECT_GT(p, 0.95);
  }
}

TEST(OnlineCalibration, PublishesOnlyInSteps) {
  const Calibration prior = shipped_like_prior();
  OnlineCalibration online(prior);
  RandomChooser rng(3);
  Calibration in_use = online.current();
  double published[kRankBuckets] = {};
  int changes = 0;
  for (int round = 0; round < 300; ++round) {
    online.observe(round_edges(prior, -0.8, 6, rng));
    const Calibration& now = online.current();
    EXPECT_NEAR(now.b - prior.b, online.published_shift(0), 1e-12);
    bool changed = now.b != in_use.b, stepped = false;
    for (int k = 0; k < kRankBuckets; ++k) {
      changed |= now.rank_offset[k] != in_use.rank_offset[k];
      stepped |= std::abs(online.published_shift(k) - published[k]) >= OnlineCalibration::kPublishStep - 1e-12;
      // The fit in use is never more than a step behind the latest.
      EXPECT_LT(std::abs(online.shift(k) - online.published_shift(k)), OnlineCalibration::kPublishStep);
    }
    if (changed) {
      EXPECT_TRUE(stepped) << round;  // a new calibration only when some bucket moved a whole step
      ++changes;
      in_use = now;
      for (int k = 0; k < kRankBuckets; ++k) published[k] = online.published_shift(k);
    }
  }
  EXPECT_GT(changes, 0);
  EXPECT_LT(changes, 100);  // far fewer table rebuilds than rounds
}

}  // namespace
}  // namespace ts::spec_decode
