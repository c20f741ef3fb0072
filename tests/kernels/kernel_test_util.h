// Shared helpers for the kernel tests: seeded random data, bit-exact comparison, and a fixture that runs a test
// once per ISA variant this CPU supports (scalar, avx2, avx512, avx512bf16: core/cpu.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"

namespace ts::kernels::testing {

constexpr double kU32 = 1.0 / (1 << 24);  // unit roundoff of f32 (2^-24)

inline std::vector<float> random_normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Number of positions where a and b differ in their bits (so -0 vs +0 and NaN payloads count).
inline size_t bit_differences(const float* a, const float* b, size_t n) {
  size_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff += std::memcmp(a + i, b + i, 4) != 0;
  return diff;
}

// TEST_P fixtures derived from this run with every supported variant active (and restore the previous one).
// Instantiate with TS_INSTANTIATE_PER_ISA(Fixture).
class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_isa(GetParam());
  }
  void TearDown() override { set_isa(saved_); }
  // f32 lanes of the variant's vectors (16, 8; 1 for scalar): reduction-chain lengths in the error bounds.
  double lanes() const {
    switch (GetParam()) {
      case Isa::Avx512:
      case Isa::Avx512Bf16:
      case Isa::Amx: return 16;
      case Isa::Avx2: return 8;
      case Isa::Scalar: break;
    }
    return 1;
  }

 private:
  Isa saved_ = Isa::Scalar;
};

inline std::string isa_test_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

// The kernels' DRAM hint (core/cpu.h, weights_streamed) set for the scope, restored after.
class StreamedHint {
 public:
  explicit StreamedHint(bool streamed) : saved_(weights_streamed()) { set_weights_streamed(streamed); }
  ~StreamedHint() { set_weights_streamed(saved_); }
  StreamedHint(const StreamedHint&) = delete;
  StreamedHint& operator=(const StreamedHint&) = delete;

 private:
  bool saved_;
};

}  // namespace ts::kernels::testing

#define TS_INSTANTIATE_PER_ISA(fixture)                                                                   \
  INSTANTIATE_TEST_SUITE_P(Isa, fixture, ::testing::ValuesIn(::ts::supported_isas()),                      \
                           ::ts::kernels::testing::isa_test_name)
