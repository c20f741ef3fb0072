// Shared helpers for the kernel tests: seeded random data and bit-exact comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

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

}  // namespace ts::kernels::testing
