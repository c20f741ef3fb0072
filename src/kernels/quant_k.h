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

}  // namespace ts::kernels::ref
