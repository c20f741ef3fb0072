// Internal: the per-variant kernel builds, declared once per variant's namespace for the dispatch tables
// (kernel_table.cc). Definitions: ops_<isa>.cc, attention_<isa>.cc, gemm_<isa>.cc, softmax_f64_<isa>.cc, each
// compiling one shared source (*-inl.h) for its ISA, and ops_scalar.cc for the scalar variant's entries that the
// references (ref_ops.cc) do not provide. The per-ISA files do not include this header: their definitions carry
// target attributes, and GCC would read a plain declaration next to them as another version of the function.
#pragma once

#include <cstdint>

#include "kernels/kv_span.h"

namespace ts::kernels::cpu {

namespace scalar {
#include "kernels/cpu/softmax_f64.inc"
float scaled_max(const float* logits, int n, float scale);
void exp_normalize(const float* logits, int n, float scale, float max_z, float* out);
void widen_row(const uint16_t* src, bool is_bf16, int dim, float* dst);
void round_to_bf16(const float* src, float* dst, int64_t n);
void to_bf16_bits(const float* src, int64_t n, uint16_t* bits);
void swiglu_rows(const float* gate_up, int rows, int inter, float* out);
// ref::attention_strided* (which throw themselves when a row sees no key) with the vector kernels' signature.
bool attention(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
               const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
               float scale);
bool attention(const float* q, const uint16_t* k_bf16, const uint16_t* v_bf16, int64_t kv_row_stride,
               int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
               int n_kv_heads, int head_dim, float scale);
bool attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
bool attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
bool attention_tiled(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out, int n_q,
                     int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale, const KVHeadHook* before_head);
bool attention_tiled_bf16kv(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out,
                            int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const KVHeadHook* before_head);
}  // namespace scalar

namespace avx2 {
#include "kernels/cpu/simd_kernels.inc"
#include "kernels/cpu/softmax_f64.inc"
}  // namespace avx2

namespace avx512 {
#include "kernels/cpu/simd_kernels.inc"
#include "kernels/cpu/softmax_f64.inc"
}  // namespace avx512

namespace avx512bf16 {
// x: [rows, in] f32 -> x_bits: [rows, k_padded] bf16 bits (zero padding column); 4-byte aligned.
void convert_rows_to_bf16(const float* x, int rows, int in_features, uint16_t* x_bits);
void gemm_bf16(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features, int in_features);
// attention-inl.h built for avx512bf16 (attention_avx512bf16.cc): vdpbf16ps over bf16 K/V.
bool attention(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
               const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
               float scale);
bool attention(const float* q, const uint16_t* k_bf16, const uint16_t* v_bf16, int64_t kv_row_stride,
               int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
               int n_kv_heads, int head_dim, float scale);
bool attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
bool attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
bool attention_tiled(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out, int n_q,
                     int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale, const KVHeadHook* before_head);
bool attention_tiled_bf16kv(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out,
                            int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const KVHeadHook* before_head);
}  // namespace avx512bf16

namespace amx {
// Needs CpuFeatures::amx_bf16 (which includes the OS's permission, asked for by core/cpu.cc).
// x_bits as avx512bf16::convert_rows_to_bf16 writes them.
void gemm_bf16(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features, int in_features);
}  // namespace amx

}  // namespace ts::kernels::cpu
