// The measured cost curve the adaptive policy prices nodes with: the monotone clean-up and the JSON round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "engine/cost_cache.h"
#include "engine/cost_curve.h"
#include "engine/tiny_pair.h"

namespace ts {
namespace {

CostModel two_rows(std::vector<double> ms) {
  CostModel c;
  c.batches = {1, 4};
  c.tokens = {1, 2, 3, 4, 5};
  c.ms = std::move(ms);
  return c;
}

TEST(CostCurve, MonotoneFitAveragesDipsAndKeepsRisingRows) {
  // Row 1: a noisy dip at k = 3 (and k = 4 below k = 2); row 2 already non-decreasing.
  CostModel c = two_rows({5.0, 6.0, 4.0, 5.0, 9.0, /**/ 10.0, 10.0, 11.0, 12.0, 20.0});
  make_monotone_in_k(c);
  // 6, 4, 5 pool to 5: then 5, 5 after a leading 5.
  const std::vector<double> want = {5.0, 5.0, 5.0, 5.0, 9.0, 10.0, 10.0, 11.0, 12.0, 20.0};
  ASSERT_EQ(c.ms.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(c.ms[i], want[i]) << i;
  c.validate();
  // The least-squares property: the row sum is kept.
  CostModel d = two_rows({3.0, 1.0, 2.0, 8.0, 7.0, 1.0, 2.0, 3.0, 4.0, 5.0});
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
  CostModel c = two_rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  c.fixed_ms = 0.5;
  c.fixed_ms_by_batch = {0.5, 1.5};
  const CostModel back = cost_model_from_json(cost_model_to_json(c));
  EXPECT_EQ(back.batches, c.batches);
  EXPECT_EQ(back.tokens, c.tokens);
  EXPECT_EQ(back.ms, c.ms);
  EXPECT_EQ(back.fixed_ms_by_batch, c.fixed_ms_by_batch);
  EXPECT_EQ(back.context, 0);  // no context term: none written, none read
  c.context = 256;
  c.ms_per_context_seq = 0.0025;
  c.ms_per_context_row = 0.00031;
  const CostModel with_term = cost_model_from_json(cost_model_to_json(c));
  EXPECT_EQ(with_term.context, 256);
  EXPECT_DOUBLE_EQ(with_term.ms_per_context_seq, 0.0025);
  EXPECT_DOUBLE_EQ(with_term.ms_per_context_row, 0.00031);
  // A file written before the term existed still loads, and prices every context at the curve's own.
  const CostModel old_file = cost_model_from_json(
      "{\"version\": 1, \"batches\": [1], \"tokens\": [1, 2], \"ms\": [[1.0, 1.5]], \"fixed_ms\": 0.2}");
  EXPECT_EQ(old_file.context, 0);
  EXPECT_DOUBLE_EQ(old_file.cost_ms(1, 2.0, 4000.0), 1.5);
  EXPECT_THROW(cost_model_from_json("{\"version\": 1, \"batches\": [1], \"tokens\": [1, 2], \"ms\": [[1.0, 1.5]], "
                                    "\"context\": 64, \"ms_per_context_seq\": -0.1}"),
               Error);
  EXPECT_THROW(cost_model_from_json("{\"version\": 1}"), Error);
  EXPECT_THROW(cost_model_from_json("not json"), Error);
}

// The context term is measured on a real forward: a curve at context 64 plus the slopes from 64 against 512 keys.
// Times are the machine's, so only what must hold whatever they are is checked: the term is recorded, finite and
// non-negative, survives the JSON file, and prices a longer context no lower.
TEST(CostCurve, MeasuresTheContextTerm) {
  testing::Pair pair = testing::make_pair(64, 64, 2, 4, DType::F32, 11);
  CostCurveOptions co;
  co.context = 64;
  co.long_context = 512;
  co.ks = {1, 2, 4};
  co.reps = 2;
  co.monotone = true;
  const CostModel cost = measure_cost_curve(*pair.target, co);
  EXPECT_EQ(cost.context, 64);
  EXPECT_TRUE(std::isfinite(cost.ms_per_context_seq) && cost.ms_per_context_seq >= 0);
  EXPECT_TRUE(std::isfinite(cost.ms_per_context_row) && cost.ms_per_context_row >= 0);
  EXPECT_GE(cost.cost_ms(1, 4.0, 512.0), cost.cost_ms(1, 4));
  const CostModel back = cost_model_from_json(cost_model_to_json(cost));
  EXPECT_EQ(back.context, 64);
  EXPECT_DOUBLE_EQ(back.ms_per_context_row, cost.ms_per_context_row);
  // Without a longer context asked for, no term.
  co.long_context = 0;
  EXPECT_EQ(measure_cost_curve(*pair.target, co).context, 0);
}

// generate and serve share one per-machine cache: the first call measures (and checks) the curve and writes it,
// the next reads the same curve back; other batches are another entry; a corrupt entry is measured again.
TEST(CostCurve, CachedCostModelMeasuresOnceAndReadsItBack) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ts_cost_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  testing::Pair pair = testing::make_pair(64, 64, 2, 4, DType::F32, 12);
  CostCacheOptions o;
  o.model_dir = "tiny-target";
  o.drafter_dir = "tiny-drafter";
  o.batches = {1, 2};
  o.context = 32;
  o.long_context = 0;
  o.reps = 1;
  const CostCacheResult first = cached_cost_model(*pair.target, pair.drafter.get(), o);
  EXPECT_FALSE(first.from_cache);
  EXPECT_TRUE(first.attempts == 1 || first.attempts == 2);
  EXPECT_GT(first.read_gbs, 0);
  EXPECT_TRUE(fs::exists(first.path)) << first.log;
  EXPECT_EQ(first.cost.batches, o.batches);
  EXPECT_EQ(first.cost.fixed_ms_by_batch.size(), 2u) << "F(b) measured with the drafter";
  EXPECT_NE(first.log.find("measured the cost curve"), std::string::npos);
  const CostCacheResult again = cached_cost_model(*pair.target, pair.drafter.get(), o);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.path, first.path);
  EXPECT_EQ(again.cost.ms, cost_model_from_json(cost_model_to_json(first.cost)).ms);
  CostCacheOptions other = o;
  other.batches = {1};
  const CostCacheResult one = cached_cost_model(*pair.target, pair.drafter.get(), other);
  EXPECT_FALSE(one.from_cache);
  EXPECT_NE(one.path, first.path);
  // A cached curve measured while the machine was busier (here: a millisecond slower per forward) is measured again.
  CostModel busy = again.cost;
  for (double& v : busy.ms) v += 1.0;
  write_cost_model(first.path, busy);
  const CostCacheResult rechecked = cached_cost_model(*pair.target, pair.drafter.get(), o);
  EXPECT_FALSE(rechecked.from_cache);
  EXPECT_NE(rechecked.log.find("busier machine"), std::string::npos) << rechecked.log;
  EXPECT_LT(read_cost_model(first.path).cost_ms(1, 1), busy.cost_ms(1, 1));
  std::ofstream(first.path) << "{ not json";
  const CostCacheResult remeasured = cached_cost_model(*pair.target, pair.drafter.get(), o);
  EXPECT_FALSE(remeasured.from_cache);
  EXPECT_NO_THROW(read_cost_model(first.path));
  ::unsetenv("XDG_CACHE_HOME");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ts
