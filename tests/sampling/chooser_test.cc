#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace ts
