// Quantized weight formats with GGUF's exact block layouts (ggml's block_q8_0, block_q4_0, block_q4_K,
// block_q6_K), their scalar quantizers (round to nearest, no importance matrix, as ggml's *_ref functions) and
// dequantizers. A row of `n` values is n / block_values(type) blocks stored one after another.
//
//   Q8_0  32 values:  f16 d, int8 qs[32];                          x = d * q
//   Q4_0  32 values:  f16 d, uint8 qs[16] (nibbles);               x = d * (q - 8); value j is qs[j] & 15,
//                                                                  value j + 16 is qs[j] >> 4
//   Q4_K  256 values: f16 d, f16 dmin, uint8 scales[12] (8 6-bit scales and 8 6-bit mins), uint8 qs[128];
//                     sub-block j of 32 values: x = d * sc[j] * q - dmin * m[j]
//   Q6_K  256 values: uint8 ql[128] (low 4 bits), uint8 qh[64] (high 2 bits), int8 scales[16], f16 d;
//                     sub-block j of 16 values: x = d * scales[j] * (q - 32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ts::kernels {

// Values are ggml's type ids (GGUF tensor types).
enum class QuantType : uint32_t { Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };

constexpr int kQK4_0 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK_K = 256;
constexpr int kKScaleSize = 12;

struct BlockQ8_0 {
  uint16_t d;      // f16 scale
  int8_t qs[32];   // values
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;       // f16 scale
  uint8_t qs[16];   // nibbles: low = values 0..15, high = values 16..31
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_K {
  uint16_t d;                   // f16 super-block scale of the quantized scales
  uint16_t dmin;                // f16 super-block scale of the quantized mins
  uint8_t scales[kKScaleSize];  // 8 scales and 8 mins, 6 bits each (layout: get_scale_min_k4)
  uint8_t qs[kQK_K / 2];        // nibbles: byte 32*c + l holds value 64c + l (low) and 64c + 32 + l (high)
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits of the 6-bit values
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 16 int8 scales of 16-value sub-blocks
  uint16_t d;                 // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

const char* quant_type_name(QuantType t);           // "Q8_0", "Q4_0", "Q4_K", "Q6_K"
bool quant_type_from_id(uint32_t ggml_type_id, QuantType* out);
int block_values(QuantType t);                      // 32 or 256
size_t block_bytes(QuantType t);                    // 34, 18, 144, 210
// Bytes of a row of n values; n must be a multiple of block_values(t) (checked: ts::Error otherwise).
size_t row_bytes(QuantType t, int64_t n);

// Q4_K's 6-bit scale and min of sub-block j (0..7), as ggml's get_scale_min_k4.
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

namespace ref {
// x: [n] f32 -> blocks: row_bytes(t, n) bytes. Round to nearest as ggml's quantize_row_*_ref.
void quantize_row(QuantType t, const float* x, void* blocks, int64_t n);
// blocks -> y: [n] f32, as ggml's dequantize_row_*.
void dequantize_row(QuantType t, const void* blocks, float* y, int64_t n);
}  // namespace ref

}  // namespace ts::kernels
