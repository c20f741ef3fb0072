// The variants' K-quant quantizers (kernel table entries quantize_q4_k and quantize_q6_k: sub-block fits in vector
// lanes on avx2 and avx512) against the scalar references ref::quantize_q4_k / q6_k, byte for byte. The references
// themselves equal llama.cpp's (quant_ref_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/quant.h"
#include "kernels/quant_k.h"
#include "kernel_test_util.h"

namespace ts::kernels::testing {
namespace {

class KQuantize : public PerIsa {};

// nb super-blocks of assorted values; every sub-block kind the fit branches on appears at several positions in the
// 16-lane groups (a constant sub-block, all zero, all positive so that the fitted min wants to be > 0, ...).
std::vector<float> assorted_values(int nb, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> x(size_t(nb) * kQK_K);
  for (int s = 0; s < nb * 8; ++s) {  // sub-blocks of 32
    float* sub = x.data() + size_t(s) * 32;
    const float scale = std::pow(10.0f, float(int(rng() % 9)) - 4.0f);  // 1e-4 .. 1e4
    switch (rng() % 10) {
      case 0: for (int i = 0; i < 32; ++i) sub[i] = 0.0f; break;
      case 1: for (int i = 0; i < 32; ++i) sub[i] = 0.37f * scale; break;             // constant positive
      case 2: for (int i = 0; i < 32; ++i) sub[i] = -0.37f * scale; break;            // constant negative
      case 3: for (int i = 0; i < 32; ++i) sub[i] = scale * (1.0f + uniform(rng)); break;  // all positive
      case 4: for (int i = 0; i < 32; ++i) sub[i] = -scale * uniform(rng); break;      // all non-positive
      case 5:
        for (int i = 0; i < 32; ++i) sub[i] = scale * normal(rng);
        sub[rng() % 32] = 1e3f * scale;  // one outlier
        break;
      case 6: for (int i = 0; i < 32; ++i) sub[i] = 1e-30f * normal(rng); break;  // tiny
      case 7: for (int i = 0; i < 32; ++i) sub[i] = float(int(rng() % 5)) * scale; break;  // few distinct values
      default: for (int i = 0; i < 32; ++i) sub[i] = scale * normal(rng); break;
    }
  }
  return x;
}

TEST_P(KQuantize, Q4KEqualsTheReferenceByteForByte) {
  const auto quantize = cpu::kernel_table(GetParam()).quantize_q4_k;
  for (int nb : {1, 2, 3, 7, 64}) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      const std::vector<float> x = assorted_values(nb, seed * 101 + uint32_t(nb));
      std::vector<BlockQ4_K> want(nb), got(nb);
      ref::quantize_q4_k(x.data(), want.data(), nb);
      std::memset(got.data(), 0xAB, sizeof(BlockQ4_K) * nb);
      quantize(x.data(), got.data(), nb);
      for (int b = 0; b < nb; ++b) {
        ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(BlockQ4_K)), 0)
            << nb << " blocks, seed " << seed << ", block " << b;
      }
    }
  }
}

TEST_P(KQuantize, Q6KEqualsTheReferenceByteForByte) {
  const auto quantize = cpu::kernel_table(GetParam()).quantize_q6_k;
  for (int nb : {1, 2, 5, 64}) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      std::vector<float> x = assorted_values(nb, seed * 37 + uint32_t(nb));
      for (size_t i = 48; i < x.size(); i += 256) std::fill(x.begin() + long(i), x.begin() + long(i) + 16, 0.0f);
      std::vector<BlockQ6_K> want(nb), got(nb);
      ref::quantize_q6_k(x.data(), want.data(), nb);
      std::memset(got.data(), 0xAB, sizeof(BlockQ6_K) * nb);
      quantize(x.data(), got.data(), nb);
      for (int b = 0; b < nb; ++b) {
        ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(BlockQ6_K)), 0)
            << nb << " blocks, seed " << seed << ", block " << b;
      }
    }
  }
}

// Q6_K super-blocks where re-quantizing must divide as the reference does: some value's level x / d against its
// stored scale rounds differently if the division is replaced by a multiply with the reciprocal. Such values are
// rare, so random blocks are searched for them (against the reference's own blocks), once per process. Q4_K's levels
// (0..15) make them rarer still: none among 16M random values, so its re-quantizing relies on the byte tests above.
const std::vector<float>& q6k_blocks_on_a_division_edge() {
  static const std::vector<float> found = [] {
    std::vector<float> blocks;
    const auto nearest = [](float v) { return int(std::nearbyint(v)); };  // half to even, as ref's nearest_int
    for (uint32_t seed = 1; seed <= 64 && blocks.size() < size_t(4) * kQK_K; ++seed) {
      const int nb = 1024;
      const std::vector<float> x = random_normal(size_t(nb) * kQK_K, 1.0f, seed);
      std::vector<BlockQ6_K> y(nb);
      ref::quantize_q6_k(x.data(), y.data(), nb);
      for (int b = 0; b < nb; ++b) {
        const float* xb = x.data() + size_t(b) * kQK_K;
        bool edge = false;
        for (int j = 0; j < 16 && !edge; ++j) {
          const float d = f16_to_f32(y[b].d) * y[b].scales[j];
          for (int i = 16 * j; i < 16 * j + 16 && d != 0; ++i) edge |= nearest(xb[i] / d) != nearest(xb[i] * (1 / d));
        }
        if (edge) blocks.insert(blocks.end(), xb, xb + kQK_K);
      }
    }
    return blocks;
  }();
  return found;
}

TEST_P(KQuantize, Q6KReQuantizingDividesAsTheReference) {
  const std::vector<float>& x = q6k_blocks_on_a_division_edge();
  ASSERT_FALSE(x.empty()) << "no Q6_K block on a division edge found";
  const int nb = int(x.size() / kQK_K);
  std::vector<BlockQ6_K> want(nb), got(nb);
  ref::quantize_q6_k(x.data(), want.data(), nb);
  cpu::kernel_table(GetParam()).quantize_q6_k(x.data(), got.data(), nb);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(BlockQ6_K) * nb), 0) << nb << " blocks";
}

TS_INSTANTIATE_PER_ISA(KQuantize);

}  // namespace
}  // namespace ts::kernels::testing
