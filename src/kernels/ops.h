// Device-neutral signatures of the CPU kernels the model and the sampler need. Every op has a scalar reference
// (ref::) and a fast version (the plain name) that runs the active ISA variant (core/cpu.h: avx2, avx512,
// avx512bf16, amx, or scalar = the references) through its kernel table (cpu/kernel_table.h), chosen at run time;
// tests/kernels checks every variant the CPU has against ref.
// All activations are f32, row-major. "rows" is the number of tokens in the batch.
// Every fast op computes a row (or element) with the same instructions whatever the batch around it and the
// thread count (vector tails are masked, never a scalar loop), so batch shape never changes a result's bits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernels/kv_span.h"

namespace ts::kernels {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]
//   x, out: [rows, dim] (out may alias x); weight: [dim]
void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps);

// Rotary embedding, "rotate half" (NeoX / Hugging Face) layout: pairs (i, i + head_dim/2).
//   x: [rows, heads, head_dim], rotated in place; positions: [rows]
//   inv_freq: [head_dim/2], the per-pair frequencies (the model's RoPE type computes them: default is
//   theta^(-2i/head_dim); llama3 / linear / yarn rescale them); attention_scale multiplies cos and sin (yarn's
//   mscale; 1 otherwise).
// As Hugging Face: angle = position * inv_freq in f32, c = cos(angle) * attention_scale, s likewise;
// x'[i] = x[i] c - x[i + half] s, x'[i + half] = x[i + half] c + x[i] s.
void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale);
// The default RoPE frequencies as Hugging Face computes them in f32: 1 / theta^(float(2i) / head_dim).
void rope_default_inv_freq(float theta, int head_dim, float* inv_freq);

// out[i] = silu(gate[i]) * up[i];  gate, up, out: [n] (out may alias gate)
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// swiglu over the rows of a fused gate / up projection, each row as swiglu(row, row + inter, out row, inter) gives it:
// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i].  gate_up: [rows, 2 inter], out: [rows, inter]
void swiglu_rows(const float* gate_up, int rows, int inter, float* out);

// In-place softmax of x: [n]
void softmax(float* x, int n);

// Grouped-query attention with an explicit visibility mask.
//   q:    [n_q, n_heads, head_dim]
//   k, v: [n_kv, n_kv_heads, head_dim]   (key/value rows, e.g. a sequence's KV cache)
//   visible: [n_q, n_kv] bytes, 1 where query row i may attend to key row j. Every query row must see >= 1 key.
//   out:  [n_q, n_heads, head_dim]
//   Query head h reads key head h / (n_heads / n_kv_heads). scale is usually 1/sqrt(head_dim).
// A row's result depends only on its own q and its visible keys, in increasing j: batch composition never
// changes a row's arithmetic (greedy speculative decoding relies on this).
void attention(const float* q, const float* k, const float* v, const uint8_t* visible, float* out, int n_q, int n_kv,
               int n_heads, int n_kv_heads, int head_dim, float scale);

// attention() with K/V addressed by strides in floats: key row j of KV head g starts at
// k + j * kv_row_stride + g * kv_head_stride (same for v). attention() is kv_row_stride = n_kv_heads * head_dim,
// kv_head_stride = head_dim. A head-major cache [n_kv_heads, capacity, head_dim] passes head_dim and
// capacity * head_dim: each head's rows are then contiguous, which streams faster at long contexts.
// Results are bit-identical to attention() on the same values.
void attention_strided(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                       const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, float scale);
// attention() over bf16 K/V (a bf16 KV cache: raw bf16 bits): each element is widened exactly to f32 on load,
// then the arithmetic is attention()'s, so the result equals attention() on the widened values.
void attention_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, const uint8_t* visible, float* out,
                      int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale);
// attention_bf16kv() with K/V addressed by strides in elements, as attention_strided() (the head-major KV cache).
void attention_strided_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_row_stride,
                              int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv,
                              int n_heads, int n_kv_heads, int head_dim, float scale);
// attention_strided*() over K/V held in pages of 2^page_shift token rows (a block table): key row j of KV head g starts
// at pages[j >> page_shift] + k_offset + g * page_head_stride + (j & (2^page_shift - 1)) * head_dim elements, value
// rows likewise from v_offset. Only the addresses differ: the same rows give the same bits as attention_strided*().
//   pages: [ceil(n_kv / 2^page_shift)] page starts, f32 or bf16 bits
void attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
void attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
// attention_strided*() over a KV cache that stores K in tiles of 16 keys (keys in vector lanes, the layout the
// kernels score from) and V in head-major rows. For KV head g, from k + g * kv_head_stride: key j's element d at
// (j >> 4) * 16 * head_dim + d * 16 + (j & 15); from v + g * kv_head_stride: value row j at j * head_dim. K must be
// readable up to n_kv rounded up to 16 keys (those lanes are computed and dropped). Every layout gives the same bits
// on the same values: this one only skips the transposition of row-major keys.
void attention_tiled(const float* q, const float* k, const float* v, int64_t kv_head_stride, const uint8_t* visible,
                     float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale);
void attention_tiled(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_head_stride,
                     const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
                     float scale);
// attention_tiled() over rows held in spans (kv_span.h): spans[0, n_spans) in increasing first_row, the first at 0,
// all below n_kv; kv_dtype F32 or BF16. A sequence whose prefix sits in blocks shared with other sequences reads them
// in place. Spans only change addresses: the same rows give the same bits as one span. `before_head` (kv_span.h), when
// given, runs once per KV head before that head's rows are read.
void attention_tiled(const float* q, const KVSpan* spans, int n_spans, DType kv_dtype, const uint8_t* visible,
                     float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                     const KVHeadHook* before_head = nullptr);

// Residual add: dst[i] += src[i];  dst, src: [n]
void add(float* dst, const float* src, int64_t n);

// bf16 bits of f32 values: bits[i] = f32_to_bf16(x[i]) (nearest even; NaN stays a quiet NaN; denormals kept).
//   x: [n], bits: [n]
void to_bf16_bits(const float* x, int64_t n, uint16_t* bits);

// Embedding lookup: out[r, :] = table[ids[r], :] as f32.
//   table: [vocab, dim] of dtype F32, F16 or BF16; ids: [rows]; out: [rows, dim]
// Throws ts::Error for an id outside [0, vocab) (ids come from user input).
void embed_rows(const void* table, DType dtype, int vocab, int dim, const int32_t* ids, int rows, float* out);

// The draft softmax's two passes (sampling/softmax_f32.h checks the input between them):
// scaled_max = max_i logits[i] * scale, NaN if any product is NaN; logits: [n].
float scaled_max(const float* logits, int n, float scale);
// out[i] = exp(logits[i] * scale - max_z) / sum, exponents below -87.3 (and -inf logits) giving exactly 0;
// logits, out: [n] (may alias); max_z finite.
void exp_normalize(const float* logits, int n, float scale, float max_z, float* out);
// The whole draft softmax: out = softmax(logits * scale); logits, out: [n] (may alias), n > 0. Throws ts::Error on
// a NaN product or when the max is not finite, before writing out. The vector variants run the two passes above
// with the check between them; the scalar variant runs ref::softmax_scaled.
void softmax_scaled(const float* logits, int n, float scale, float* out);

// The target distribution's double passes (sampling/distribution.cc). Plain IEEE operations in a fixed order, never
// contracted to FMA: every variant gives the same bits, only faster.
// z[i] = double(logits[i]) / temperature; returns the largest z (NaNs never win), *nan_count = the NaN z's.
// logits: [n], z: [n].
double scale_to_f64_and_max(const float* logits, int n, double temperature, double* z, int* nan_count);
// out[i] = exp(x[i]) for x[i] <= 0 (-inf gives 0); x, out: [n] (may alias). A degree-13 polynomial after a
// Cody-Waite split, within 2 ulp of std::exp over the whole range, subnormal results included.
void exp_nonpositive_f64(const double* x, int n, double* out);
// The sum of x: [n] in a fixed order (8 interleaved partial sums, combined pairwise).
double sum_f64(const double* x, int n);
// x[i] /= by; x: [n].
void divide_f64(double* x, int n, double by);

// The ISA variant the plain-named ops (and Linear) run now, and how to switch it: core/cpu.h's functions, also
// reachable as kernels::set_isa etc. (process-wide). set_isa throws ts::Error for a variant the CPU lacks.
using ts::active_isa;
using ts::Isa;
using ts::set_isa;
using ts::supported_isas;
const char* ops_isa();  // isa_name(active_isa())
int simd_lanes();       // f32 lanes of the active variant's vectors: 16, 8, or 1 (scalar)

namespace ref {
void add(float* dst, const float* src, int64_t n);
void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps);
void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void softmax(float* x, int n);
// The scalar draft softmax: max of logits[i] * scale (throwing at the first NaN), exp with std::exp in f32 (no
// floor), normalised by the double sum.
void softmax_scaled(const float* logits, int n, float scale, float* out);
void attention(const float* q, const float* k, const float* v, const uint8_t* visible, float* out, int n_q, int n_kv,
               int n_heads, int n_kv_heads, int head_dim, float scale);
void attention_strided(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                       const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, float scale);
void attention_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, const uint8_t* visible, float* out,
                      int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale);
void attention_strided_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_row_stride,
                              int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv,
                              int n_heads, int n_kv_heads, int head_dim, float scale);
void attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
void attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
void attention_tiled(const float* q, const KVSpan* spans, int n_spans, DType kv_dtype, const uint8_t* visible,
                     float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale);
}  // namespace ref

}  // namespace ts::kernels
