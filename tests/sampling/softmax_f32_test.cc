// The draft softmax: the dispatched version under every ISA variant the CPU supports against the scalar one and a
// double reference, masked logits, temperature, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/cpu.h"
#include "core/error.h"
#include "sampling/softmax_f32.h"

namespace ts {
namespace {

class SoftmaxF32 : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_isa(GetParam());
  }
  void TearDown() override { set_isa(saved_); }

 private:
  Isa saved_ = Isa::Scalar;
};
INSTANTIATE_TEST_SUITE_P(Isa, SoftmaxF32, ::testing::ValuesIn(supported_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST_P(SoftmaxF32, MatchesDoubleReference) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0, 4);
  for (int n : {1, 7, 16, 33, 1000, 8195}) {
    std::vector<float> logits(n), fast(n), scalar(n);
    for (float& v : logits) v = normal(rng);
    if (n > 7) logits[3] = -std::numeric_limits<float>::infinity();
    for (float inv_t : {1.0f, 2.5f, 0.4f}) {
      softmax_f32(logits.data(), n, inv_t, fast.data());
      ref::softmax_f32(logits.data(), n, inv_t, scalar.data());
      double max_z = -1e300, sum = 0;
      for (float v : logits) max_z = std::max(max_z, double(v) * inv_t);
      std::vector<double> want(n);
      for (int i = 0; i < n; ++i) sum += want[i] = std::exp(double(logits[i]) * inv_t - max_z);
      double total = 0;
      for (int i = 0; i < n; ++i) {
        want[i] /= sum;
        // Relative error: the polynomial's ~1e-7 plus float rounding of z = logit / T - max, which grows with |z|.
        const double z = std::abs(double(logits[i]) * inv_t - max_z);
        const double tol = want[i] * (2e-6 + 2e-7 * (std::isfinite(z) ? z : 0)) + 1e-37;
        EXPECT_NEAR(fast[i], want[i], tol) << "n " << n << " i " << i;
        EXPECT_NEAR(scalar[i], want[i], tol);
        total += fast[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
      if (n > 7) {
        EXPECT_EQ(fast[3], 0.0f);
      }
    }
  }
}

TEST_P(SoftmaxF32, InPlaceAndDeterministic) {
  std::vector<float> a = {1, 2, 3, -1, 0.5f}, b = a, out(5);
  softmax_f32(a.data(), 5, 1.0f, out.data());
  softmax_f32(b.data(), 5, 1.0f, b.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], b[i]);
}

TEST_P(SoftmaxF32, RejectsBadInput) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out(3);
  const std::vector<float> masked = {-inf, -inf, -inf}, nan = {0, std::nanf(""), 1}, plus_inf = {0, inf, 1};
  EXPECT_THROW(softmax_f32(masked.data(), 3, 1, out.data()), Error);
  EXPECT_THROW(softmax_f32(nan.data(), 3, 1, out.data()), Error);
  EXPECT_THROW(softmax_f32(plus_inf.data(), 3, 1, out.data()), Error);
  EXPECT_THROW(softmax_f32(masked.data(), 0, 1, out.data()), Error);
  EXPECT_THROW(softmax_f32(masked.data(), 3, 0, out.data()), Error);
}

}  // namespace
}  // namespace ts
