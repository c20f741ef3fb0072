#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "sampling/chooser.h"

namespace ts {
namespace {

TEST(RandomChooser, SameSeedSameSequence) {
  RandomChooser a(42), b(42), c(43);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differ += x != c.next_u64();
  }
  EXPECT_GT(differ, 95);
}

TEST(RandomChooser, UniformInUnitInterval) {
  RandomChooser r(1);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));  // 5 standard errors
}

TEST(RandomChooser, FrequenciesMatchAndZeroNeverChosen) {
  RandomChooser r(9);
  const double probs[] = {0.1, 0.0, 0.2, 0.7, 0.0};
  int counts[5] = {};
  const int n = 200000;
  for (int i = 0; i < n; ++i) ++counts[r.choose(probs, 5)];
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[4], 0);
  for (int i = 0; i < 5; ++i) {
    const double sd = std::sqrt(probs[i] * (1 - probs[i]) / n);
    EXPECT_NEAR(static_cast<double>(counts[i]) / n, probs[i], 5 * sd + 1e-12) << i;
  }
}

TEST(RandomChooser, UnnormalisedAndDegenerateInput) {
  RandomChooser r(3);
  const double only_last[] = {0, 0, 2.5};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(r.choose(only_last, 3), 2);
  const double zeros[] = {0, 0};
  EXPECT_THROW(r.choose(zeros, 2), Error);
  EXPECT_THROW(r.choose(zeros, 0), Error);
}

// Many blocks (draw_total's order) with zero weights inside and at the block edges: frequencies match
// w / sum, zeros are never drawn, and choose_f32 draws exactly as choose() on the widened weights.
TEST(RandomChooser, ManyBlocksFloatAndDoubleAgree) {
  const int n = 200;  // 4 blocks of 64, the last partial
  std::vector<float> w(n);
  for (int i = 0; i < n; ++i) w[i] = (i % 5 == 0 || i == 63 || i == 64 || i == 199) ? 0.0f : float(1 + i % 7);
  const std::vector<double> wd(w.begin(), w.end());
  const double sum = std::accumulate(wd.begin(), wd.end(), 0.0);
  EXPECT_NEAR(draw_total(w.data(), n), sum, 1e-12 * sum);
  RandomChooser a(11), b(11);
  std::vector<int> counts(n, 0);
  const int draws = 300000;
  for (int k = 0; k < draws; ++k) {
    const int i = a.choose_f32(w.data(), n);
    ASSERT_EQ(i, b.choose(wd.data(), n));
    ++counts[i];
  }
  for (int i = 0; i < n; ++i) {
    const double p = wd[i] / sum;
    if (p == 0) {
      EXPECT_EQ(counts[i], 0) << i;
    } else {
      EXPECT_NEAR(double(counts[i]) / draws, p, 5 * std::sqrt(p * (1 - p) / draws)) << i;
    }
  }
}

// One positive weight in the middle of a long zero run is the only possible draw; the base Chooser's
// choose_f32 hands a chooser the widened weights.
TEST(Chooser, SinglePositiveAndDefaultWidening) {
  std::vector<float> w(1000, 0.0f);
  w[517] = 1e-30f;
  RandomChooser r(2);
  for (int k = 0; k < 50; ++k) EXPECT_EQ(r.choose_f32(w.data(), 1000), 517);
  struct Recording : Chooser {
    std::vector<double> seen;
    int choose(const double* probs, int n) override {
      seen.assign(probs, probs + n);
      return 0;
    }
  } rec;
  const float f[] = {0.25f, 0.1f, 0.65f};
  rec.Chooser::choose_f32(f, 3);
  ASSERT_EQ(rec.seen.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rec.seen[i], double(f[i]));
}

}  // namespace
}  // namespace ts
