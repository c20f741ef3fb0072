// The measured cost curve the adaptive policy prices nodes with: the monotone clean-up and the JSON round trip.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/cost_curve.h"

namespace ts {
namespace {

spec::CostModel two_rows(std::vector<double> ms) {
  spec::CostModel c;
  c.batches = {1, 4};
  c.tokens = {1, 2, 3, 4, 5};
  c.ms = std::move(ms);
  return c;
}

TEST(CostCurve, MonotoneFitAveragesDipsAndKeepsRisingRows) {
  // Row 1: a noisy dip at k = 3 (and k = 4 below k = 2); row 2 already non-decreasing.
  spec::CostModel c = two_rows({5.0, 6.0, 4.0, 5.0, 9.0, /**/ 10.0, 10.0, 11.0, 12.0, 20.0});
  make_monotone_in_k(c);
  // 6, 4, 5 pool to 5: then 5, 5 after a leading 5.
  const std::vector<double> want = {5.0, 5.0, 5.0, 5.0, 9.0, 10.0, 10.0, 11.0, 12.0, 20.0};
  ASSERT_EQ(c.ms.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(c.ms[i], want[i]) << i;
  c.validate();
  // The least-squares property: the row sum is kept.
  spec::CostModel d = two_rows({3.0, 1.0, 2.0, 8.0, 7.0, 1.0, 2.0, 3.0, 4.0, 5.0});
  make_monotone_in_k(d);
  double sum = 0;
  for (int j = 0; j < 5; ++j) {
    sum += d.ms[j];
    if (j > 0) {
      EXPECT_LE(d.ms[j - 1], d.ms[j]);
    }
  }
  EXPECT_DOUBLE_EQ(sum, 21.0);
  EXPECT_DOUBLE_EQ(d.ms[0], 2.0);
  EXPECT_DOUBLE_EQ(d.ms[3], 7.5);
}

TEST(CostCurve, PolicyTokenCountsAreDenseWhereTheTilesStep) {
  const std::vector<int> ks = policy_token_counts();
  ASSERT_GE(ks.size(), 8u);
  for (int k = 1; k <= 8; ++k) EXPECT_EQ(ks[k - 1], k);
  for (size_t i = 1; i < ks.size(); ++i) EXPECT_LT(ks[i - 1], ks[i]);
}

TEST(CostCurve, JsonRoundTripAndErrors) {
  spec::CostModel c = two_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  c.fixed_ms = 0.5;
  c.fixed_ms_by_batch = {0.5, 1.5};
  const spec::CostModel back = cost_model_from_json(cost_model_to_json(c));
  EXPECT_EQ(back.batches, c.batches);
  EXPECT_EQ(back.tokens, c.tokens);
  EXPECT_EQ(back.ms, c.ms);
  EXPECT_EQ(back.fixed_ms_by_batch, c.fixed_ms_by_batch);
  EXPECT_THROW(cost_model_from_json("{\"version\": 1}"), Error);
  EXPECT_THROW(cost_model_from_json("not json"), Error);
}

}  // namespace
}  // namespace ts
