// The scalar variant's kernels that the references (ref_ops.cc) do not provide with the table's signature: the
// draft softmax's two passes, the embedding widening, the activations' bf16 rounding, and attention with the vector
// kernels' signature. Plain C++ in the base x86-64 build, like the references.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/ops.h"

namespace ts::kernels::cpu::scalar {

float scaled_max(const float* logits, int n, float scale) {
  float max_z = -INFINITY;
  for (int i = 0; i < n; ++i) {
    const float z = logits[i] * scale;
    if (std::isnan(z)) return NAN;
    max_z = std::max(max_z, z);
  }
  return max_z;
}

void exp_normalize(const float* logits, int n, float scale, float max_z, float* out) {
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float z = logits[i] * scale - max_z;
    sum += out[i] = z < -87.3f ? 0.0f : std::exp(z);
  }
  const float inv_sum = float(1 / sum);
  for (int i = 0; i < n; ++i) out[i] *= inv_sum;
}

void widen_row(const uint16_t* src, bool is_bf16, int dim, float* dst) {
  for (int i = 0; i < dim; ++i) dst[i] = is_bf16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
}

void round_to_bf16(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
}

void swiglu_rows(const float* gate_up, int rows, int inter, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up + size_t(r) * 2 * inter;
    ref::swiglu(gate, gate + inter, out + size_t(r) * inter, inter);
  }
}

void to_bf16_bits(const float* src, int64_t n, uint16_t* bits) {
  for (int64_t i = 0; i < n; ++i) bits[i] = f32_to_bf16(src[i]);
}

bool attention(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
               const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
               float scale) {
  ref::attention_strided(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads,
                         head_dim, scale);
  return true;
}

bool attention(const float* q, const uint16_t* k_bf16, const uint16_t* v_bf16, int64_t kv_row_stride,
               int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
               int n_kv_heads, int head_dim, float scale) {
  ref::attention_strided_bf16kv(q, k_bf16, v_bf16, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads,
                                n_kv_heads, head_dim, scale);
  return true;
}

bool attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  ref::attention_paged(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv, n_heads,
                       n_kv_heads, head_dim, scale);
  return true;
}

bool attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  ref::attention_paged(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv, n_heads,
                       n_kv_heads, head_dim, scale);
  return true;
}

bool attention_tiled(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out, int n_q,
                     int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale, const KVHeadHook* before_head) {
  for (int g = 0; before_head && g < n_kv_heads; ++g) (*before_head)(g);
  ref::attention_tiled(q, spans, n_spans, DType::F32, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
  return true;
}

bool attention_tiled_bf16kv(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out,
                            int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const KVHeadHook* before_head) {
  for (int g = 0; before_head && g < n_kv_heads; ++g) (*before_head)(g);
  ref::attention_tiled(q, spans, n_spans, DType::BF16, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
  return true;
}

}  // namespace ts::kernels::cpu::scalar
