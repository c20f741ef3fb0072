// K-quant quantizing (ref::quantize_q4_k and ref::quantize_q6_k, ggml's quantize_row_q4_K_ref / q6_K_ref) with the
// sub-block fits 16 (avx512) or 8 (avx2) at a time, one sub-block per vector lane: every lane does the reference
// fit's f32 operations in its order (no FMA contraction, the same rounding trick), its branches turned into per-lane
// selects, so the levels and scales are the reference's bits (tests/kernels/quant_k_fit_test.cc compares every
// byte). The rest of a super-block is ref::finish_block_q4k's / q6k's steps (6-bit or int8 scales, packing), the
// re-quantizing between them in vectors too.
//
// Why: a Q4_K fit tries 21 grids per 32-value sub-block (Q6_K: 19 per 16 values), each a chain of dependent f32
// sums, and loading a bf16 model with --quantize q4_k_m spent most of its time there
// (docs/results/optimization-notes.md, "Q4_K quantizing: fits in vector lanes"). Vertical lanes keep each
// sub-block's sums in the reference's order.
//
// Written once with GCC's vector extensions: the body is always-inline, so each entry point below compiles it for
// its own target.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/quant.h"
#include "kernels/quant_k.h"

// ggml rounds every product and sum on its own; a contracted multiply-add would change the bits.
#pragma GCC optimize("fp-contract=off")
// The vector types only live inside the per-ISA entry points (everything else inlines into them).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ts::kernels::cpu {
namespace {

constexpr int kSubValues = 32;     // values per Q4_K sub-block
constexpr int kSubBlocks = 8;      // sub-blocks per super-block
constexpr int kMaxLevel = 15;
constexpr int kQ6KSubValues = 16;  // values per Q6_K sub-block
constexpr int kQ6KSubBlocks = 16;  // sub-blocks per Q6_K super-block
constexpr int kQ6KHalfRange = 32;  // levels -32..31, stored as 0..63
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a sub-block with |x| below this is all zero

#define TS_FIT_INLINE __attribute__((always_inline)) inline

// Vectors of kLanes f32 / int32 lanes (comparison results: 0 / -1).
template <int kLanes>
struct Vectors;
template <>
struct Vectors<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};
template <>
struct Vectors<16> {
  typedef float F __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
};

// The fits for kLanes sub-blocks at once (16 for avx512: two super-blocks; 8 for avx2: one).
template <int kLanes>
struct Lanes {
  using F = typename Vectors<kLanes>::F;
  using I = typename Vectors<kLanes>::I;

  // ref's nearest_int per lane: adding 1.5 * 2^23 moves the rounded integer into the low mantissa bits.
  static TS_FIT_INLINE I nearest_int(F v) {
    const I bits = reinterpret_cast<I>(v + 12582912.0f);
    return (bits & 0x007fffff) - 0x00400000;
  }

  // Per lane, mask ? a : b (mask lanes all ones or zero), as bit operations. GCC 12 turns a vector ?: on a mask it
  // built from several comparisons into per-lane scalar code, and recognizes the bit operations as the same ?:, so
  // such masks go through opaque() first (an empty asm: GCC no longer knows the lanes are comparison results).
  static TS_FIT_INLINE I select(I mask, I a, I b) {
    return (a & mask) | (b & ~mask);
  }
  static TS_FIT_INLINE I opaque(I mask) {
    __asm__("" : "+m"(mask));
    return mask;
  }
  static TS_FIT_INLINE F select(I mask, F a, F b) {
    return reinterpret_cast<F>(select(mask, reinterpret_cast<I>(a), reinterpret_cast<I>(b)));
  }

  // ref's unsigned_levels: the nearest of 0..15 to (x - min) * inv_step, per lane.
  static TS_FIT_INLINE I unsigned_level(F x, F inv_step, F min) {
    I l = nearest_int(inv_step * (x - min));
    l = select(l < 0, I{}, l);
    return select(l > kMaxLevel, I{} + kMaxLevel, l);
  }

  // kLanes sub-blocks x: [kLanes][32] -> levels [kLanes][32], scales, neg_mins [kLanes], as ref::fit_q4k_sub_block
  // for each.
  static TS_FIT_INLINE void fit(const float* x, uint8_t* levels, float* scales, float* neg_mins) {
    F xt[kSubValues], wt[kSubValues];  // [value][lane]
    {  // transposed through memory: element inserts into vectors compile to long insert chains
      alignas(64) float columns[kSubValues][kLanes];
      for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < kSubValues; ++i) columns[i][lane] = x[lane * kSubValues + i];
      std::memcpy(xt, columns, sizeof columns);
    }
    // Weights: the sub-block's rms plus |x|.
    F sum_x2 = {};
    for (int i = 0; i < kSubValues; ++i) sum_x2 = sum_x2 + xt[i] * xt[i];
    F rms;
    for (int lane = 0; lane < kLanes; ++lane) rms[lane] = std::sqrt(sum_x2[lane] / kSubValues);
    for (int i = 0; i < kSubValues; ++i)
      wt[i] = rms + reinterpret_cast<F>(reinterpret_cast<I>(xt[i]) & 0x7fffffff);

    // ref's fit_scale_min, lane by lane.
    F min = xt[0], max = xt[0], sum_w = wt[0], sum_x = sum_w * xt[0];
    for (int i = 1; i < kSubValues; ++i) {
      min = select(xt[i] < min, xt[i], min);
      max = select(xt[i] > max, xt[i], max);
      sum_w = sum_w + wt[i];
      sum_x = sum_x + wt[i] * xt[i];
    }
    min = select(opaque(min > 0), F{}, min);
    const I constant = opaque(max == min);  // the reference returns early: levels 0, scale 0, neg_min -min
    F inv_step = kMaxLevel / (max - min);
    F scale = 1 / inv_step;
    I best[kSubValues];
    F best_error = {};
    for (int i = 0; i < kSubValues; ++i) {
      best[i] = unsigned_level(xt[i], inv_step, min);
      const F diff = scale * __builtin_convertvector(best[i], F) + min - xt[i];
      best_error = best_error + wt[i] * (diff * diff);
    }
    for (int t = 0; t <= 20; ++t) {
      inv_step = (-1.0f + 0.1f * t + kMaxLevel) / (max - min);
      I trial[kSubValues];
      F sum_l = {}, sum_l2 = {}, sum_xl = {};
      for (int i = 0; i < kSubValues; ++i) {
        trial[i] = unsigned_level(xt[i], inv_step, min);
        const F l = __builtin_convertvector(trial[i], F);
        sum_l = sum_l + wt[i] * l;
        sum_l2 = sum_l2 + wt[i] * l * l;
        sum_xl = sum_xl + wt[i] * l * xt[i];
      }
      const F det = sum_w * sum_l2 - sum_l * sum_l;
      const I fits = opaque(det > 0);  // NaN does not fit, as the reference's `!(det > 0)`
      F trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      F trial_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      const I positive_min = opaque(trial_min > 0);
      trial_scale = select(positive_min, sum_xl / sum_l2, trial_scale);
      trial_min = select(positive_min, F{}, trial_min);
      F error = {};
      for (int i = 0; i < kSubValues; ++i) {
        const F diff = trial_scale * __builtin_convertvector(trial[i], F) + trial_min - xt[i];
        error = error + wt[i] * (diff * diff);
      }
      const I better = opaque(fits & (error < best_error) & ~constant);
      for (int i = 0; i < kSubValues; ++i) best[i] = select(better, trial[i], best[i]);
      best_error = select(better, error, best_error);
      scale = select(better, trial_scale, scale);
      min = select(better, trial_min, min);
    }
    scale = select(constant, F{}, scale);
    const F neg_min = -min;
    std::memcpy(scales, &scale, sizeof scale);
    std::memcpy(neg_mins, &neg_min, sizeof neg_min);
    alignas(64) int32_t columns[kSubValues][kLanes];
    for (int i = 0; i < kSubValues; ++i) {
      const I l = best[i] & ~constant;
      std::memcpy(columns[i], &l, sizeof l);
    }
    for (int lane = 0; lane < kLanes; ++lane)
      for (int i = 0; i < kSubValues; ++i) levels[lane * kSubValues + i] = uint8_t(columns[i][lane]);
  }

  // ref::requantize_q4k for one super-block, kLanes values of a sub-block at a time: per value the same add, division
  // and rounding, so the same levels.
  static TS_FIT_INLINE void requantize_q4k(const float* x, const BlockQ4_K& y, uint8_t* levels) {
    typedef uint8_t Bytes __attribute__((vector_size(kLanes)));
    const float d_super = f16_to_f32(y.d), dmin_super = f16_to_f32(y.dmin);
    for (int j = 0; j < kSubBlocks; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, y.scales, &sc, &m);
      const float d = d_super * sc;
      if (d == 0) continue;  // keeps the fitted levels
      const float dm = dmin_super * m;
      for (int i = kSubValues * j; i < kSubValues * (j + 1); i += kLanes) {
        F v;
        std::memcpy(&v, x + i, sizeof v);
        I l = nearest_int((v + dm) / d);
        l = select(l < 0, I{}, l);
        l = select(l > kMaxLevel, I{} + kMaxLevel, l);
        const Bytes bytes = __builtin_convertvector(l, Bytes);
        std::memcpy(levels + i, &bytes, sizeof bytes);
      }
    }
  }

  // ref::requantize_q6k for one super-block, kLanes values at a time (a 16-value sub-block is 16 / kLanes vectors):
  // per value the same division and rounding, so the same levels.
  static TS_FIT_INLINE void requantize_q6k(const float* x, const BlockQ6_K& y, uint8_t* levels) {
    typedef uint8_t Bytes __attribute__((vector_size(kLanes)));
    const float d_super = f16_to_f32(y.d);
    for (int j = 0; j < kQ6KSubBlocks; ++j) {
      const float d = d_super * y.scales[j];
      if (d == 0) continue;  // keeps the fitted levels
      for (int i = kQ6KSubValues * j; i < kQ6KSubValues * (j + 1); i += kLanes) {
        F v;
        std::memcpy(&v, x + i, sizeof v);
        I l = nearest_int(v / d);  // a division, as the reference (not signed_level's multiply)
        l = select(l < -kQ6KHalfRange, I{} - kQ6KHalfRange, l);
        l = select(l > kQ6KHalfRange - 1, I{} + (kQ6KHalfRange - 1), l);
        const Bytes bytes = __builtin_convertvector(l + kQ6KHalfRange, Bytes);
        std::memcpy(levels + i, &bytes, sizeof bytes);
      }
    }
  }

  // ref's signed_level: the nearest of -32..31 to x * inv_scale, per lane.
  static TS_FIT_INLINE I signed_level(F x, F inv_scale) {
    I l = nearest_int(inv_scale * x);
    l = select(l < -kQ6KHalfRange, I{} - kQ6KHalfRange, l);
    return select(l > kQ6KHalfRange - 1, I{} + (kQ6KHalfRange - 1), l);
  }

  // ref's weighted_level_sums per lane (xt: [16][lanes]).
  static TS_FIT_INLINE void weighted_level_sums(const F* xt, F inv_scale, F* sum_lx, F* sum_l2) {
    F lx = {}, l2 = {};
    for (int i = 0; i < kQ6KSubValues; ++i) {
      const F l = __builtin_convertvector(signed_level(xt[i], inv_scale), F);
      const F w = xt[i] * xt[i];
      lx = lx + w * xt[i] * l;
      l2 = l2 + w * l * l;
    }
    *sum_lx = lx, *sum_l2 = l2;
  }

  // kLanes Q6_K sub-blocks x: [kLanes][16] -> levels [kLanes][16] (level + 32), scales [kLanes], as
  // ref::fit_q6k_sub_block for each. The kept grid's levels are recomputed from its inv_scale at the end (the
  // reference computes them from the same inv_scale when it keeps the grid).
  static TS_FIT_INLINE void fit_q6k(const float* x, uint8_t* levels, float* scales) {
    F xt[kQ6KSubValues];  // [value][lane]
    {
      alignas(64) float columns[kQ6KSubValues][kLanes];
      for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < kQ6KSubValues; ++i) columns[i][lane] = x[lane * kQ6KSubValues + i];
      std::memcpy(xt, columns, sizeof columns);
    }
    F max = {}, amax = {};
    for (int i = 0; i < kQ6KSubValues; ++i) {
      const F ax = reinterpret_cast<F>(reinterpret_cast<I>(xt[i]) & 0x7fffffff);
      const I larger = opaque(ax > amax);
      amax = select(larger, ax, amax);
      max = select(larger, xt[i], max);
    }
    const I zero = opaque(amax < kGroupMaxEps);  // the reference returns early: levels 0 (-32), scale 0
    F inv_scale = -kQ6KHalfRange / max;
    F best_inv_scale = inv_scale;
    F sum_lx, sum_l2;
    weighted_level_sums(xt, inv_scale, &sum_lx, &sum_l2);
    F scale = select(opaque(sum_l2 != 0), sum_lx / sum_l2, F{});
    F best = scale * sum_lx;
    for (int t = -9; t <= 9; ++t) {
      if (t == 0) continue;
      inv_scale = -(kQ6KHalfRange + 0.1f * t) / max;
      weighted_level_sums(xt, inv_scale, &sum_lx, &sum_l2);
      const I better = opaque((sum_l2 > 0) & (sum_lx * sum_lx > best * sum_l2));
      best_inv_scale = select(better, inv_scale, best_inv_scale);
      scale = select(better, sum_lx / sum_l2, scale);
      best = select(better, scale * sum_lx, best);
    }
    scale = select(zero, F{}, scale);
    std::memcpy(scales, &scale, sizeof scale);
    alignas(64) int32_t columns[kQ6KSubValues][kLanes];
    for (int i = 0; i < kQ6KSubValues; ++i) {
      const I l = (signed_level(xt[i], best_inv_scale) + kQ6KHalfRange) & ~zero;
      std::memcpy(columns[i], &l, sizeof l);
    }
    for (int lane = 0; lane < kLanes; ++lane)
      for (int i = 0; i < kQ6KSubValues; ++i) levels[lane * kQ6KSubValues + i] = uint8_t(columns[i][lane]);
  }

  // nb Q6_K super-blocks of x -> blocks: each one's 16 sub-blocks through fit_q6k, 16 / kLanes calls.
  static TS_FIT_INLINE void quantize_q6_k(const float* x, void* blocks, int64_t nb) {
    BlockQ6_K* y = static_cast<BlockQ6_K*>(blocks);
    constexpr int kSuper = kQ6KSubBlocks * kQ6KSubValues;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t levels[kSuper];
      float scales[kQ6KSubBlocks];
      for (int part = 0; part < kQ6KSubBlocks / kLanes; ++part)
        fit_q6k(x + b * kSuper + part * kLanes * kQ6KSubValues, levels + part * kLanes * kQ6KSubValues,
                scales + part * kLanes);
      if (!ref::store_scales_q6k(scales, &y[b])) continue;  // ref::finish_block_q6k's steps, the middle one here
      requantize_q6k(x + b * kSuper, y[b], levels);
      ref::pack_levels_q6k(levels, &y[b]);
    }
  }

  // nb super-blocks of x -> blocks: kLanes / 8 at a time through fit, the rest through the reference's fits.
  static TS_FIT_INLINE void quantize_q4_k(const float* x, void* blocks, int64_t nb) {
    BlockQ4_K* y = static_cast<BlockQ4_K*>(blocks);
    constexpr int kSuper = kSubBlocks * kSubValues, kSupers = kLanes / kSubBlocks;
    int64_t b = 0;
    for (; b + kSupers <= nb; b += kSupers) {
      uint8_t levels[kLanes * kSubValues];
      float scales[kLanes], neg_mins[kLanes];
      fit(x + b * kSuper, levels, scales, neg_mins);
      for (int h = 0; h < kSupers; ++h) {  // ref::finish_block_q4k's steps, the re-quantizing in vectors
        ref::store_scales_q4k(scales + kSubBlocks * h, neg_mins + kSubBlocks * h, &y[b + h]);
        requantize_q4k(x + (b + h) * kSuper, y[b + h], levels + kSuper * h);
        ref::pack_levels_q4k(levels + kSuper * h, &y[b + h]);
      }
    }
    if (b < nb) ref::quantize_q4_k(x + b * kSuper, &y[b], nb - b);
  }
};

}  // namespace

namespace avx2 {
__attribute__((target("avx2"))) void quantize_q4_k(const float* x, void* blocks, int64_t nb) {
  Lanes<8>::quantize_q4_k(x, blocks, nb);
}
__attribute__((target("avx2"))) void quantize_q6_k(const float* x, void* blocks, int64_t nb) {
  Lanes<8>::quantize_q6_k(x, blocks, nb);
}
}  // namespace avx2

namespace avx512 {
__attribute__((target("avx512f,avx512dq"))) void quantize_q4_k(const float* x, void* blocks, int64_t nb) {
  Lanes<16>::quantize_q4_k(x, blocks, nb);
}
__attribute__((target("avx512f,avx512dq"))) void quantize_q6_k(const float* x, void* blocks, int64_t nb) {
  Lanes<16>::quantize_q6_k(x, blocks, nb);
}
}  // namespace avx512

}  // namespace ts::kernels::cpu
