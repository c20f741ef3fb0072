// Widening stored float tensors to f32 (for reference paths, tests and small tensors such as norms).
#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"

namespace ts::io {

std::vector<float> to_f32(const TensorRef& t) {
  const size_t elem_size = dtype_size(t.dtype);
  TS_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16, "tensor '", t.name, "' in ",
           t.file, ": expected a float dtype (F32, F16, BF16) but file has ", dtype_name(t.dtype));
  TS_CHECK(elem_size > 0 && t.nbytes % elem_size == 0, "tensor '", t.name, "' in ", t.file, ": ", t.nbytes,
           " bytes is not a whole number of ", dtype_name(t.dtype), " elements");
  const size_t count = t.nbytes / elem_size;
  std::vector<float> out(count);  // [numel]
  if (count == 0) return out;
  // The mapped data carries no alignment guarantee (offsets are arbitrary), so read elements with memcpy.
  if (t.dtype == DType::F32) {
    std::memcpy(out.data(), t.data, t.nbytes);
  } else {
    const bool is_bf16 = t.dtype == DType::BF16;
    for (size_t i = 0; i < count; ++i) {
      uint16_t bits;  // little-endian on every host we build for
      std::memcpy(&bits, t.data + 2 * i, 2);
      out[i] = is_bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
  }
  return out;
}

}  // namespace ts::io
