// The cost model's prices: the load-adaptive theta's arithmetic, interpolation, and its limits (flat cost -> 0, proportional
// cost -> 1 for the first node, rising as the cost curve becomes linear).
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/cost_model.h"
#include "spec_decode/expand.h"

namespace ts {
namespace {

// L(k) = fixed + per_token * k at one batch size, measured at k = 1, 2, 4, 8, 16.
CostModel affine(double fixed, double per_token) {
  CostModel m;
  m.batches = {1};
  m.tokens = {1, 2, 4, 8, 16};
  for (int k : m.tokens) m.ms.push_back(fixed + per_token * k);
  return m;
}

TEST(ThetaPolicy, RuleArithmetic) {
  const CostModel m = affine(10, 1);  // L(3) = 13, L(4) = 14
  EXPECT_NEAR(adaptive_theta(m, 1, 3, 2.5), (14.0 - 13.0) * 2.5 / 13.0, 1e-12);
  // Worth adding iff the tokens-per-ms rate does not drop: check the equivalence directly.
  const double theta = adaptive_theta(m, 1, 3, 2.5);
  EXPECT_NEAR((2.5 + theta) / 14.0, 2.5 / 13.0, 1e-12);
}

TEST(ThetaPolicy, FixedRoundCostLowersTheThreshold) {
  CostModel m = affine(10, 1);
  m.fixed_ms = 7;  // e.g. the drafter's forward: paid every round whatever the tree
  const double theta = adaptive_theta(m, 1, 3, 2.5);
  EXPECT_NEAR(theta, (14.0 - 13.0) * 2.5 / (13.0 + 7.0), 1e-12);
  // Still the break-even point of the whole round's token rate.
  EXPECT_NEAR((2.5 + theta) / (14.0 + 7.0), 2.5 / (13.0 + 7.0), 1e-12);
  EXPECT_LT(theta, adaptive_theta(affine(10, 1), 1, 3, 2.5));
}

TEST(ThetaPolicy, FlatCostGivesZeroAndProportionalCostGivesOne) {
  EXPECT_NEAR(adaptive_theta(affine(10, 0), 1, 1, 1.0), 0.0, 1e-12);
  EXPECT_NEAR(adaptive_theta(affine(0.001, 1), 1, 1, 1.0), 1.0, 1e-3);
  // Proportional cost: theta = E / k, i.e. the tree's mean survival per token so far.
  EXPECT_NEAR(adaptive_theta(affine(1e-9, 2), 1, 5, 3.0), 3.0 / 5, 1e-6);
}

TEST(ThetaPolicy, RisesTowardOneAsTheCurveBecomesLinear) {
  double previous = -1;
  for (double fixed : {100.0, 30.0, 10.0, 3.0, 1.0, 0.1, 0.0}) {
    const double theta = adaptive_theta(affine(fixed, 1), 1, 1, 1.0);
    EXPECT_GT(theta, previous) << fixed;
    EXPECT_LE(theta, 1.0 + 1e-12);
    previous = theta;
  }
  EXPECT_NEAR(previous, 1.0, 1e-12);
}

TEST(ThetaPolicy, InterpolatesAcrossBatchAndExtrapolatesInK) {
  CostModel m;
  m.batches = {1, 9};
  m.tokens = {1, 3};
  m.ms = {10, 12,   // batch 1: slope 1 per token
          20, 40};  // batch 9: slope 10 per token
  EXPECT_NEAR(m.cost_ms(1, 2), 11, 1e-12);
  EXPECT_NEAR(m.cost_ms(1, 5), 14, 1e-12);   // beyond the table: the last slope
  EXPECT_NEAR(m.cost_ms(5, 1), 15, 1e-12);   // halfway between the batches
  EXPECT_NEAR(m.cost_ms(50, 2), 30, 1e-12);  // past the last batch: clamped to it
  EXPECT_LT(adaptive_theta(m, 1, 2, 1.5), adaptive_theta(m, 9, 2, 1.5));
}

// The context term: contexts up to the curve's own cost what the curve says; longer ones add attention, linear in
// the extra context and in the rows (b * (ctx - context) * (seq + row * (k - 1))), so a node at a long context is
// priced higher and the threshold rises with the context.
TEST(ThetaPolicy, LongerContextsPriceNodesHigher) {
  CostModel m = affine(10, 0.2);
  EXPECT_DOUBLE_EQ(m.cost_ms(1, 4.0, 5000.0), m.cost_ms(1, 4));  // no term measured: the curve alone
  m.context = 256;
  m.ms_per_context_seq = 0.002;
  m.ms_per_context_row = 0.0005;
  m.validate();
  EXPECT_DOUBLE_EQ(m.cost_ms(1, 4.0, 100.0), m.cost_ms(1, 4));  // shorter: the curve's own cost
  EXPECT_DOUBLE_EQ(m.cost_ms(1, 4.0, -1.0), m.cost_ms(1, 4));
  EXPECT_NEAR(m.cost_ms(1, 4.0, 1256.0), m.cost_ms(1, 4) + 1000 * (0.002 + 0.0005 * 3), 1e-12);
  EXPECT_NEAR(m.cost_ms(2, 4.0, 1256.0), m.cost_ms(2, 4) + 2 * 1000 * (0.002 + 0.0005 * 3), 1e-12);
  EXPECT_NEAR(m.cost_ms(1, 2.5, 1256.0), 0.5 * (m.cost_ms(1, 2) + m.cost_ms(1, 3)) + 1000 * (0.002 + 0.0005 * 1.5),
              1e-12);
  // The rule at a long context is the same rule on the context's own curve.
  const double at_long = adaptive_theta(m, 1, 3, 2.5, 1256);
  const double now = m.cost_ms(1, 3.0, 1256.0), next = m.cost_ms(1, 4.0, 1256.0);
  EXPECT_NEAR(at_long, (next - now) * 2.5 / now, 1e-12);
  EXPECT_DOUBLE_EQ(adaptive_theta(m, 1, 3, 2.5, 200), adaptive_theta(m, 1, 3, 2.5));
  double previous = adaptive_theta(m, 1, 3, 2.5, 256);
  for (int ctx : {512, 1024, 4096, 16384}) {
    const double theta = adaptive_theta(m, 1, 3, 2.5, ctx);
    EXPECT_GT(theta, previous) << ctx;
    previous = theta;
  }
  EXPECT_NEAR(step_cost_ms(m, 2, 5.0, 1, 1256), m.cost_ms(2, 2.5, 1256.0) + m.fixed_cost_ms(1), 1e-12);
  EXPECT_TRUE(speculation_pays(m, 1, 4, 1.5, 256));
  EXPECT_FALSE(speculation_pays(m, 1, 4, 1.5, 16384));  // attention over 16k keys per extra row: no longer pays
  m.ms_per_context_row = -1e-4;
  EXPECT_THROW(m.validate(), Error);
}

// A staircase curve: the 5th token costs a step, the next ones almost nothing. The marginal rule (m = 1) stops
// before the step; the round-level rule crosses it when the nodes after it pay for it together.
TEST(ThetaPolicy, NodePaysAheadCrossesACostStep) {
  CostModel c;
  c.batches = {1};
  c.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  c.ms = {10, 10, 10, 10, 14, 14, 14, 14};
  c.validate();
  // The round's price as the engine hands it to expansion (engine_run.cc), at batch 1 and the curve's context.
  auto price = [&c](double node_ms) {
    return spec_decode::RoundCost([&c, node_ms](int k) { return round_cost_ms(c, 1, k, -1, node_ms); });
  };
  using spec_decode::node_pays_ahead;
  EXPECT_DOUBLE_EQ(round_cost_ms(c, 1, 4), 10.0);
  EXPECT_DOUBLE_EQ(round_cost_ms(c, 1, 4, -1, 0.5), 11.5);  // three nodes' work on top
  // k = 4, E = 2.5: one node worth 0.3 gives 2.8 / 14 < 2.5 / 10, four give 3.7 / 14 > 0.25.
  EXPECT_DOUBLE_EQ(adaptive_theta(c, 1, 4, 2.5), 1.0) << "the marginal rule wants a sure node";
  EXPECT_FALSE(node_pays_ahead(price(0), 4, 2.5, 0.3, 1));
  EXPECT_FALSE(node_pays_ahead(price(0), 4, 2.5, 0.3, 3));
  EXPECT_TRUE(node_pays_ahead(price(0), 4, 2.5, 0.3, 4));
  EXPECT_FALSE(node_pays_ahead(price(0), 4, 2.5, 0.2, 4)) << "3.3 / 14 < 0.25";
  // m = 1 is exactly the marginal threshold.
  for (double s : {0.05, 0.1, 0.2, 0.5})
    EXPECT_EQ(node_pays_ahead(price(0), 2, 2.0, s, 1), s >= adaptive_theta(c, 1, 2, 2.0)) << s;
  // Per-node work outside the forward is priced: a flat stretch stops paying when nodes cost their own work.
  EXPECT_TRUE(node_pays_ahead(price(0), 2, 2.0, 0.1, 1));
  EXPECT_FALSE(node_pays_ahead(price(1.0), 2, 2.0, 0.1, 1)) << "2.1 / 12 < 2 / 11";
}

TEST(ThetaPolicy, RejectsBadTables) {
  CostModel m = affine(1, 1);
  m.ms.pop_back();
  EXPECT_THROW(m.validate(), Error);
  m = affine(1, 1);
  m.tokens = {1, 1, 2, 3, 4};
  EXPECT_THROW(m.validate(), Error);
  m = affine(-5, 1);
  EXPECT_THROW(m.validate(), Error);
  EXPECT_THROW(adaptive_theta(affine(1, 1), 1, 0, 1.0), Error);
}

}  // namespace
}  // namespace ts
