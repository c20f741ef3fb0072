// Embedding lookup: rows of a [vocab, dim] table converted to f32. Memory-bound and tiny per token, so plain
// scalar conversion (the compiler vectorises the bf16 shift) is enough.
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"

namespace ts::kernels {

void embed_rows(const void* table, DType dtype, int vocab, int dim, const int32_t* ids, int rows, float* out) {
  TS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
           "embed_rows: table dtype must be F32, F16 or BF16, got ", dtype_name(dtype));
  TS_CHECK(vocab > 0 && dim > 0, "embed_rows: expected vocab > 0 and dim > 0, got ", vocab, " and ", dim);
  for (int r = 0; r < rows; ++r) {
    const int32_t id = ids[r];
    TS_CHECK(id >= 0 && id < vocab, "embed_rows: token id ", id, " at row ", r, " is outside the vocabulary [0, ",
             vocab, ")");
    float* dst = out + size_t(r) * dim;  // [dim]
    const size_t offset = size_t(id) * dim;
    if (dtype == DType::F32) {
      std::memcpy(dst, static_cast<const float*>(table) + offset, size_t(dim) * 4);
    } else if (dtype == DType::BF16) {
      const uint16_t* src = static_cast<const uint16_t*>(table) + offset;
      for (int i = 0; i < dim; ++i) dst[i] = bf16_to_f32(src[i]);
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(table) + offset;
      for (int i = 0; i < dim; ++i) dst[i] = f16_to_f32(src[i]);
    }
  }
}

}  // namespace ts::kernels
