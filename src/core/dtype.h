// Element types of stored tensors and the bf16/f16 <-> f32 conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ts {

enum class DType { F32, F16, BF16, I32, I64, U8, Bool, F64, I8, I16, U16, U32, U64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(const std::string& name, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace ts
