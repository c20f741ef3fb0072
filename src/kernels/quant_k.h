// Internal: the K-quant (256-value super-block) scalar quantizers and dequantizers behind ref::quantize_row and
// ref::dequantize_row (kernels/quant.h); nb = number of blocks.
#pragma once

#include <cstdint>

#include "kernels/quant.h"

namespace ts::kernels::ref {

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);    // as ggml's quantize_row_q4_K_ref
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);    // as ggml's quantize_row_q6_K_ref
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb);  // as ggml's dequantize_row_q4_K
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb);  // as ggml's dequantize_row_q6_K

// quantize_q4_k's two halves, so that a vector kernel can fit many sub-blocks at once (cpu/quant_k_fit.cc):
// One 32-value sub-block x: [32] -> levels [32] (0..15); returns its scale, *neg_min = -min >= 0.
float fit_q4k_sub_block(const float* x, uint8_t* levels, float* neg_min);
// A super-block x: [256] from its 8 fits (scales, neg_mins: [8]; levels: [256], re-quantized in place) -> y: the
// three steps below, in order.
void finish_block_q4k(const float* x, const float* scales, const float* neg_mins, uint8_t* levels, BlockQ4_K* y);
// y's 6-bit scales and mins and its d and dmin, from the 8 fits.
void store_scales_q4k(const float* scales, const float* neg_mins, BlockQ4_K* y);
// Each sub-block's levels [32 j, 32 j + 32) re-quantized against y's stored scale and min: the nearest of 0..15 to
// (x + dmin * m_j) / (d * sc_j). A sub-block whose stored scale is 0 keeps its fitted levels (as ggml).
void requantize_q4k(const float* x, const BlockQ4_K& y, uint8_t* levels);
// levels [256] -> y's nibbles.
void pack_levels_q4k(const uint8_t* levels, BlockQ4_K* y);
// quantize_q6_k's halves: one 16-value sub-block x: [16] -> levels [16] (0..63); returns its (signed) scale. A
// super-block x: [256] from its 16 fits (scales: [16]; levels: [256], re-quantized in place) -> y: the three steps
// below, in order.
float fit_q6k_sub_block(const float* x, uint8_t* levels);
void finish_block_q6k(const float* x, const float* scales, uint8_t* levels, BlockQ6_K* y);
// y's int8 scales and d, from the 16 fits. False when every fit is (nearly) zero: y is then the all-zero block, done.
bool store_scales_q6k(const float* scales, BlockQ6_K* y);
// Each sub-block's levels [16 j, 16 j + 16) re-quantized against y's stored scale: the nearest of -32..31 to
// x / (d * sc_j), stored + 32. A sub-block whose stored scale is 0 keeps its fitted levels (as ggml).
void requantize_q6k(const float* x, const BlockQ6_K& y, uint8_t* levels);
// levels [256] (0..63) -> y's ql and qh planes.
void pack_levels_q6k(const uint8_t* levels, BlockQ6_K* y);

}  // namespace ts::kernels::ref
