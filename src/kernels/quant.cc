// Format facts and the Q8_0 / Q4_0 scalar quantizers and dequantizers (ggml's quantize_row_q8_0_ref,
// quantize_row_q4_0_ref, dequantize_row_q8_0, dequantize_row_q4_0); the K-quants live in quant_k.cc.
#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/quant_k.h"

// The quantizers must round like ggml's reference C (no fused multiply-add), whatever flags a build adds.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ts::kernels {

const char* quant_type_name(QuantType t) {
  switch (t) {
    case QuantType::Q8_0: return "Q8_0";
    case QuantType::Q4_0: return "Q4_0";
    case QuantType::Q4_K: return "Q4_K";
    case QuantType::Q6_K: return "Q6_K";
  }
  return "?";
}

bool quant_type_from_id(uint32_t id, QuantType* out) {
  switch (id) {
    case uint32_t(QuantType::Q8_0):
    case uint32_t(QuantType::Q4_0):
    case uint32_t(QuantType::Q4_K):
    case uint32_t(QuantType::Q6_K): *out = QuantType(id); return true;
  }
  return false;
}

int block_values(QuantType t) { return t == QuantType::Q8_0 || t == QuantType::Q4_0 ? 32 : kQK_K; }

size_t block_bytes(QuantType t) {
  switch (t) {
    case QuantType::Q8_0: return sizeof(BlockQ8_0);
    case QuantType::Q4_0: return sizeof(BlockQ4_0);
    case QuantType::Q4_K: return sizeof(BlockQ4_K);
    case QuantType::Q6_K: return sizeof(BlockQ6_K);
  }
  return 0;
}

size_t row_bytes(QuantType t, int64_t n) {
  TS_CHECK(n >= 0 && n % block_values(t) == 0, quant_type_name(t), ": a row of ", n,
           " values is not a whole number of ", block_values(t), "-value blocks");
  return size_t(n / block_values(t)) * block_bytes(t);
}

namespace ref {
namespace {

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t lo = uint8_t(std::min(15, int(int8_t(x[j] * id + 8.5f))));
      const uint8_t hi = uint8_t(std::min(15, int(int8_t(x[j + kQK4_0 / 2] * id + 8.5f))));
      y[i].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) *y++ = float(x[i].qs[j]) * d;
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK4_0 / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

}  // namespace

void quantize_row(QuantType t, const float* x, void* blocks, int64_t n) {
  const int64_t nb = int64_t(row_bytes(t, n) / block_bytes(t));
  switch (t) {
    case QuantType::Q8_0: return quantize_q8_0(x, static_cast<BlockQ8_0*>(blocks), nb);
    case QuantType::Q4_0: return quantize_q4_0(x, static_cast<BlockQ4_0*>(blocks), nb);
    case QuantType::Q4_K: return quantize_q4_k(x, static_cast<BlockQ4_K*>(blocks), nb);
    case QuantType::Q6_K: return quantize_q6_k(x, static_cast<BlockQ6_K*>(blocks), nb);
  }
}

void dequantize_row(QuantType t, const void* blocks, float* y, int64_t n) {
  const int64_t nb = int64_t(row_bytes(t, n) / block_bytes(t));
  switch (t) {
    case QuantType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(blocks), y, nb);
    case QuantType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(blocks), y, nb);
    case QuantType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(blocks), y, nb);
    case QuantType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(blocks), y, nb);
  }
}

}  // namespace ref
}  // namespace ts::kernels
