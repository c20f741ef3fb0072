// The K-quant scalar references: ggml's quantize_row_q4_K_ref, quantize_row_q6_K_ref, dequantize_row_q4_K and
// dequantize_row_q6_K, bit for bit. Bit-exactness comes from doing the same f32 operations in the same order as
// ggml-quants.c (so keep every product, sum and division as it is written here) and from one rounding helper,
// nearest_int, that reproduces ggml's bit trick. Checked against llama.cpp itself by tests/kernels/quant_ref_test.cc
// (fixtures from tools/py/make_quant_fixtures.py).
//
// Q4_K: 8 sub-blocks of 32 values, x ~ d * sc[j] * q - dmin * m[j], q in 0..15, sc and m 6-bit.
//   1. Per sub-block, fit a scale and a min (make_qkx2_quants): weighted least squares over 21 trial grids.
//   2. Quantize the 8 scales and 8 mins to 6 bits against their largest (d = max_scale / 63).
//   3. Re-quantize each value with the stored (rounded) scale and min.
// Q6_K: 16 sub-blocks of 16 values, x ~ d * scales[j] * (q - 32), q in 0..63, scales int8.
//   1. Per sub-block, a signed scale (make_qx_quants): 19 trial scales, the best by x^2-weighted least squares.
//   2. Quantize the 16 scales to int8 against the largest |scale| (which maps to -128).
//   3. Re-quantize each value with the stored scale.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "kernels/quant_k.h"

// A fused multiply-add rounds once where ggml rounds twice, so contraction would break bit-exactness on any build
// with FMA enabled (-march=native, aarch64). Keep it off for this file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ts::kernels::ref {
namespace {

constexpr int kQ4KSubBlocks = kQK_K / 32;  // 8 sub-blocks of 32 values
constexpr int kQ4KSubValues = 32;
constexpr int kQ4KMaxLevel = 15;
constexpr int kQ6KSubBlocks = kQK_K / 16;  // 16 sub-blocks of 16 values
constexpr int kQ6KSubValues = 16;
constexpr int kQ6KHalfRange = 32;          // levels -32..31, stored as 0..63
constexpr float kGroupMaxEps = 1e-15f;     // ggml's GROUP_MAX_EPS: a group with |x| below this is all zero

// Round to nearest, ties to even, exactly as ggml's nearest_int: adding 1.5 * 2^23 moves the integer part into the
// low mantissa bits. Exact for |v| < 2^22; beyond that (ggml asserts only in debug builds) the same bits give the
// same out-of-range number as ggml, which every caller then clamps.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// ---------------------------------------------------------------------------------------------------------------
// Q4_K

// levels[i] = the nearest of 0..15 to (x[i] - min) * inv_step.
void unsigned_levels(const float* x, float inv_step, float min, uint8_t* levels) {
  for (int i = 0; i < kQ4KSubValues; ++i)
    levels[i] = uint8_t(std::clamp(nearest_int(inv_step * (x[i] - min)), 0, kQ4KMaxLevel));
}

// sum_i weights[i] * (scale * levels[i] + min - x[i])^2
float weighted_sq_error(const float* x, const float* weights, const uint8_t* levels, float scale, float min) {
  float error = 0;
  for (int i = 0; i < kQ4KSubValues; ++i) {
    const float diff = scale * levels[i] + min - x[i];
    error += weights[i] * (diff * diff);
  }
  return error;
}

// ggml's make_qkx2_quants with Q4_K's arguments (32 values, 15 levels, rmin -1, rdelta 0.1, 20 steps, squared
// error): fits x ~ scale * level + min with min <= 0. Starts from the grid spanning [min(x, 0), max(x)], then tries
// 21 grids of 14..16 steps over that span; for each it solves the weighted least-squares scale and min of those
// levels and keeps the fit with the smallest weighted squared error. levels: [32] the chosen levels. Returns the
// scale; *neg_min = -min >= 0.
float fit_scale_min(const float* x, const float* weights, uint8_t* levels, float* neg_min) {
  constexpr float kFirstStepOffset = -1.0f, kStepOffsetDelta = 0.1f;
  constexpr int kTrials = 20;
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < kQ4KSubValues; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {  // constant zero (or constant negative: then all values sit on level 0 = min)
    std::fill(levels, levels + kQ4KSubValues, uint8_t(0));
    *neg_min = -min;
    return 0.0f;
  }
  float inv_step = kQ4KMaxLevel / (max - min);
  float scale = 1 / inv_step;
  unsigned_levels(x, inv_step, min, levels);
  float best_error = weighted_sq_error(x, weights, levels, scale, min);
  uint8_t trial[kQ4KSubValues];
  for (int t = 0; t <= kTrials; ++t) {
    inv_step = (kFirstStepOffset + kStepOffsetDelta * t + kQ4KMaxLevel) / (max - min);
    unsigned_levels(x, inv_step, min, trial);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < kQ4KSubValues; ++i) {
      const float w = weights[i];
      const int l = trial[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;  // (written so that NaN skips, as ggml's `if (D > 0)`)
    float trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float trial_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (trial_min > 0) {  // the format's min is subtracted: refit the scale alone with min = 0
      trial_min = 0;
      trial_scale = sum_xl / sum_l2;
    }
    const float error = weighted_sq_error(x, weights, trial, trial_scale, trial_min);
    if (error < best_error) {
      std::copy(trial, trial + kQ4KSubValues, levels);
      best_error = error;
      scale = trial_scale;
      min = trial_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// Stores the 6-bit scales and mins in the 12-byte layout that q4k_scale_min reads: sub-blocks 0..3 in the low 6
// bits of bytes j (scale) and j + 4 (min); sub-blocks 4..7 in the nibbles of byte j + 4, their top 2 bits in the
// spare high bits of bytes j - 4 (scale) and j (min).
void pack_scales_q4k(const uint8_t* scale6, const uint8_t* min6, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = scale6[j];
    packed[j + 4] = min6[j];
  }
  for (int j = 4; j < kQ4KSubBlocks; ++j) {
    packed[j + 4] = uint8_t((scale6[j] & 0xF) | ((min6[j] & 0xF) << 4));
    packed[j - 4] |= uint8_t((scale6[j] >> 4) << 6);
    packed[j] |= uint8_t((min6[j] >> 4) << 6);
  }
}

}  // namespace

float fit_q4k_sub_block(const float* x, uint8_t* levels, float* neg_min) {
  // Weights (ggml's, without an importance matrix): the sub-block's rms plus |x|, favouring large values.
  float sum_x2 = 0;
  for (int l = 0; l < kQ4KSubValues; ++l) sum_x2 += x[l] * x[l];
  const float rms = std::sqrt(sum_x2 / kQ4KSubValues);
  float weights[kQ4KSubValues];
  for (int l = 0; l < kQ4KSubValues; ++l) weights[l] = rms + std::fabs(x[l]);
  return fit_scale_min(x, weights, levels, neg_min);
}

void store_scales_q4k(const float* scales, const float* neg_mins, BlockQ4_K* y) {
  float max_scale = 0, max_neg_min = 0;
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (neg_mins[j] > max_neg_min) max_neg_min = neg_mins[j];
  }

  // 6-bit scales and mins relative to the largest of each. The uint8_t cast before the clamp is ggml's: a
  // (theoretically) negative fitted scale wraps to a large byte and clamps to 63.
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_neg_min > 0 ? 63.f / max_neg_min : 0.f;
  uint8_t scale6[kQ4KSubBlocks], min6[kQ4KSubBlocks];
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    scale6[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    min6[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * neg_mins[j])));
  }
  pack_scales_q4k(scale6, min6, y->scales);
  y->d = f32_to_f16(max_scale / 63.f);
  y->dmin = f32_to_f16(max_neg_min / 63.f);
}

void requantize_q4k(const float* x, const BlockQ4_K& y, uint8_t* levels) {
  const float d_super = f16_to_f32(y.d), dmin_super = f16_to_f32(y.dmin);
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, y.scales, &sc, &m);
    const float d = d_super * sc;
    if (d == 0) continue;
    const float dm = dmin_super * m;
    for (int i = kQ4KSubValues * j; i < kQ4KSubValues * (j + 1); ++i)
      levels[i] = uint8_t(std::clamp(nearest_int((x[i] + dm) / d), 0, kQ4KMaxLevel));
  }
}

void pack_levels_q4k(const uint8_t* levels, BlockQ4_K* y) {
  // Nibbles: byte 32c + l holds value 64c + l (low) and 64c + 32 + l (high).
  for (int c = 0; c < kQK_K / 64; ++c)
    for (int l = 0; l < 32; ++l) y->qs[32 * c + l] = uint8_t(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
}

void finish_block_q4k(const float* x, const float* scales, const float* neg_mins, uint8_t* levels, BlockQ4_K* y) {
  store_scales_q4k(scales, neg_mins, y);
  requantize_q4k(x, *y, levels);
  pack_levels_q4k(levels, y);
}

namespace {

void quantize_block_q4k(const float* x, BlockQ4_K* y) {
  uint8_t levels[kQK_K];
  float scales[kQ4KSubBlocks], neg_mins[kQ4KSubBlocks];
  for (int j = 0; j < kQ4KSubBlocks; ++j)
    scales[j] = fit_q4k_sub_block(x + kQ4KSubValues * j, levels + kQ4KSubValues * j, &neg_mins[j]);
  finish_block_q4k(x, scales, neg_mins, levels, y);
}

// ---------------------------------------------------------------------------------------------------------------
// Q6_K

// The nearest of -32..31 to x * inv_scale.
inline int signed_level(float x, float inv_scale) {
  return std::clamp(nearest_int(inv_scale * x), -kQ6KHalfRange, kQ6KHalfRange - 1);
}

// x^2-weighted sums of the levels at inv_scale: *sum_lx = sum w x l, *sum_l2 = sum w l^2.
void weighted_level_sums(const float* x, float inv_scale, float* sum_lx, float* sum_l2) {
  *sum_lx = 0;
  *sum_l2 = 0;
  for (int i = 0; i < kQ6KSubValues; ++i) {
    const int l = signed_level(x[i], inv_scale);
    const float w = x[i] * x[i];
    *sum_lx += w * x[i] * l;
    *sum_l2 += w * l * l;
  }
}

// ggml's make_qx_quants with Q6_K's arguments (16 values, nmax 32, rmse_type 1: weights x^2, no importance
// matrix). The largest |x| (signed: max) first maps to level -32; then 18 more grids with max at -(32 + 0.1 t),
// t = -9..9, and keeps the one whose least-squares scale explains the most weighted energy (sum_lx^2 / sum_l2).
// levels: [16] level + 32. Returns the least-squares scale of the kept grid (its sign opposite to max's).
float fit_scale_q6k(const float* x, uint8_t* levels) {
  float max = 0, amax = 0;
  for (int i = 0; i < kQ6KSubValues; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {  // all zero: levels 0 (that is, -32) with scale 0, as ggml
    std::fill(levels, levels + kQ6KSubValues, uint8_t(0));
    return 0.f;
  }
  float inv_scale = -kQ6KHalfRange / max;
  for (int i = 0; i < kQ6KSubValues; ++i) levels[i] = uint8_t(kQ6KHalfRange + signed_level(x[i], inv_scale));
  float sum_lx, sum_l2;
  weighted_level_sums(x, inv_scale, &sum_lx, &sum_l2);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int t = -9; t <= 9; ++t) {
    if (t == 0) continue;
    inv_scale = -(kQ6KHalfRange + 0.1f * t) / max;
    weighted_level_sums(x, inv_scale, &sum_lx, &sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < kQ6KSubValues; ++i) levels[i] = uint8_t(kQ6KHalfRange + signed_level(x[i], inv_scale));
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace

// Splits the 6-bit levels into ggml's planes. Per 128-value half c: ql byte 64c + l holds the low nibbles of
// values l (low) and l + 64 (high), byte 64c + 32 + l those of l + 32 and l + 96; qh byte 32c + l holds the top
// 2 bits of values l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6 (value offsets within the half).
void pack_levels_q6k(const uint8_t* levels, BlockQ6_K* y) {
  for (int c = 0; c < kQK_K / 128; ++c) {
    const uint8_t* half = levels + 128 * c;
    uint8_t* ql = y->ql + 64 * c;
    uint8_t* qh = y->qh + 32 * c;
    for (int l = 0; l < 32; ++l) {
      ql[l] = uint8_t((half[l] & 0xF) | ((half[l + 64] & 0xF) << 4));
      ql[l + 32] = uint8_t((half[l + 32] & 0xF) | ((half[l + 96] & 0xF) << 4));
      qh[l] = uint8_t((half[l] >> 4) | ((half[l + 32] >> 4) << 2) | ((half[l + 64] >> 4) << 4) |
                      ((half[l + 96] >> 4) << 6));
    }
  }
}

float fit_q6k_sub_block(const float* x, uint8_t* levels) { return fit_scale_q6k(x, levels); }

bool store_scales_q6k(const float* scales, BlockQ6_K* y) {
  float max_scale = 0, max_abs_scale = 0;  // the scale with the largest magnitude, and that magnitude
  for (int j = 0; j < kQ6KSubBlocks; ++j) {
    const float abs_scale = std::fabs(scales[j]);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scales[j];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {  // all zero
    std::memset(y, 0, sizeof *y);
    y->d = f32_to_f16(0.f);
    return false;
  }

  // int8 scales: max_scale maps to -128 (so that sign never needs the unrepresentable +128); the rest clamp at 127.
  const float inv_scale = -128.f / max_scale;
  y->d = f32_to_f16(1 / inv_scale);
  for (int j = 0; j < kQ6KSubBlocks; ++j) y->scales[j] = int8_t(std::min(127, nearest_int(inv_scale * scales[j])));
  return true;
}

void requantize_q6k(const float* x, const BlockQ6_K& y, uint8_t* levels) {
  const float d_super = f16_to_f32(y.d);
  for (int j = 0; j < kQ6KSubBlocks; ++j) {
    const float d = d_super * y.scales[j];
    if (d == 0) continue;
    for (int i = kQ6KSubValues * j; i < kQ6KSubValues * (j + 1); ++i) {
      const int l = std::clamp(nearest_int(x[i] / d), -kQ6KHalfRange, kQ6KHalfRange - 1);
      levels[i] = uint8_t(l + kQ6KHalfRange);
    }
  }
}

void finish_block_q6k(const float* x, const float* scales, uint8_t* levels, BlockQ6_K* y) {
  if (!store_scales_q6k(scales, y)) return;
  requantize_q6k(x, *y, levels);
  pack_levels_q6k(levels, y);
}

namespace {

void quantize_block_q6k(const float* x, BlockQ6_K* y) {
  uint8_t levels[kQK_K];
  float scales[kQ6KSubBlocks];
  for (int j = 0; j < kQ6KSubBlocks; ++j) scales[j] = fit_scale_q6k(x + kQ6KSubValues * j, levels + kQ6KSubValues * j);
  finish_block_q6k(x, scales, levels, y);
}

}  // namespace

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_block_q4k(x + i * kQK_K, &y[i]);
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_block_q6k(x + i * kQK_K, &y[i]);
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    for (int c = 0; c < kQK_K / 64; ++c, y += 64) {  // two sub-blocks share the 32 bytes of chunk c
      const uint8_t* q = x[i].qs + 32 * c;
      uint8_t sc, m;
      q4k_scale_min(2 * c, x[i].scales, &sc, &m);
      const float d_low = d * sc, min_low = dmin * m;
      q4k_scale_min(2 * c + 1, x[i].scales, &sc, &m);
      const float d_high = d * sc, min_high = dmin * m;
      for (int l = 0; l < 32; ++l) y[l] = d_low * (q[l] & 0xF) - min_low;
      for (int l = 0; l < 32; ++l) y[32 + l] = d_high * (q[l] >> 4) - min_high;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int c = 0; c < kQK_K / 128; ++c, y += 128) {  // the layout of pack_levels_q6k
      const uint8_t* ql = x[i].ql + 64 * c;
      const uint8_t* qh = x[i].qh + 32 * c;
      const int8_t* sc = x[i].scales + 8 * c;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;  // value l + 32k is in sub-block 2k + s of this half
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - kQ6KHalfRange;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - kQ6KHalfRange;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - kQ6KHalfRange;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - kQ6KHalfRange;
        y[l] = d * sc[s] * q0;
        y[l + 32] = d * sc[s + 2] * q1;
        y[l + 64] = d * sc[s + 4] * q2;
        y[l + 96] = d * sc[s + 6] * q3;
      }
    }
  }
}

}  // namespace ts::kernels::ref
