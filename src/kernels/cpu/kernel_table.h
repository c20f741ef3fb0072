// Internal: the one ISA dispatch of the CPU kernels. Each variant (core/cpu.h: scalar, avx2, avx512, avx512bf16,
// amx) has a table of entry points, filled once per process (kernel_table.cc); an op reads the active variant's
// table once per call of a whole kernel and calls through it, so set_isa switches every kernel at once and a hot
// loop never dispatches. The front-ends (ops_dispatch.cc, linear.cc, qgemm.cc, sampling/) check arguments and
// call a table entry; they hold no per-ISA code.
//
// The quantized GEMM has its own kernel variants (QgemmKernel: with or without VNNI), so it has a table per
// QgemmKernel, and each ISA table points at the one that variant runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/kv_span.h"
#include "kernels/quant.h"

namespace ts::kernels::cpu {

// y: [rows, out_features] for the 16-row groups [group_begin, group_end) of packed weights of type t.
using QgemmGroupsFn = void (*)(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
                               int out_features, int in_features, int group_begin, int group_end);

struct QgemmTable {
  QgemmKernel kernel = QgemmKernel::Scalar;
  const char* name = nullptr;     // qgemm_kernel_name: "avx512-vnni"
  const char* backend = nullptr;  // Linear::backend_name: "qgemm-avx512-vnni"
  bool supported = false;         // this CPU has what the kernel needs
  // Blocks [block_begin, block_end) of x's 32-value blocks -> the same blocks of acts (shaped by the caller,
  // quantize_rows); the same bits from every kernel.
  void (*quantize_blocks)(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts) = nullptr;
  QgemmGroupsFn groups = nullptr;    // Q8_0, Q4_0 (qgemm.h)
  QgemmGroupsFn groups_k = nullptr;  // Q4_K, Q6_K (qgemm_k.h)
};

// A variant's kernels; the contracts are ops.h's (the op of the same name), gemm_packed.h's and softmax_f64.inc's.
struct KernelTable {
  Isa isa = Isa::Scalar;
  int lanes = 1;  // f32 lanes of the variant's vectors: 16, 8, or 1 (scalar)
  // ops.h
  void (*add)(float* dst, const float* src, int64_t n) = nullptr;
  void (*rmsnorm)(const float* x, const float* weight, float* out, int rows, int dim, float eps) = nullptr;
  void (*rope)(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
               float attention_scale) = nullptr;
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*swiglu_rows)(const float* gate_up, int rows, int inter, float* out) = nullptr;
  void (*softmax)(float* x, int n) = nullptr;
  // Return false if some query row sees no key (the scalar ones throw instead).
  bool (*attention)(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                    const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                    int head_dim, float scale) = nullptr;
  bool (*attention_bf16kv)(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_row_stride,
                           int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv,
                           int n_heads, int n_kv_heads, int head_dim, float scale) = nullptr;
  bool (*attention_paged)(const float* q, const float* const* pages, int page_shift, int64_t k_offset,
                          int64_t v_offset, int64_t page_head_stride, const uint8_t* visible, float* out, int n_q,
                          int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) = nullptr;
  bool (*attention_paged_bf16kv)(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset,
                                 int64_t v_offset, int64_t page_head_stride, const uint8_t* visible, float* out,
                                 int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) = nullptr;
  bool (*attention_tiled)(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out,
                          int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                          const KVHeadHook* before_head) = nullptr;
  bool (*attention_tiled_bf16kv)(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out,
                                 int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                                 const KVHeadHook* before_head) = nullptr;
  // One embedding row: src: [dim] bf16 (is_bf16) or f16 bits -> dst: [dim] f32.
  void (*widen_row)(const uint16_t* src, bool is_bf16, int dim, float* dst) = nullptr;
  float (*scaled_max)(const float* logits, int n, float scale) = nullptr;
  void (*exp_normalize)(const float* logits, int n, float scale, float max_z, float* out) = nullptr;
  void (*softmax_scaled)(const float* logits, int n, float scale, float* out) = nullptr;
  void (*to_bf16_bits)(const float* src, int64_t n, uint16_t* bits) = nullptr;
  // x: [nb * 256] -> nb BlockQ4_K with ref::quantize_q4_k's bytes (a model's load-time --quantize q4_k_m).
  void (*quantize_q4_k)(const float* x, void* blocks, int64_t nb) = nullptr;
  void (*quantize_q6_k)(const float* x, void* blocks, int64_t nb) = nullptr;  // the same for Q6_K
  // Linear (gemm_packed.h): x: [rows, in_features] f32 -> y: [rows, out_features], weights packed once.
  void (*round_to_bf16)(const float* src, float* dst, int64_t n) = nullptr;
  void (*linear_f32)(const float* x, const float* packed, float* y, int rows, int out_features,
                     int in_features) = nullptr;
  // Rounds (or converts) the activations to bf16 itself, then runs the variant's bf16 GEMM.
  void (*linear_bf16)(const float* x, const uint16_t* packed, float* y, int rows, int out_features,
                      int in_features) = nullptr;
  const char* linear_f32_backend = nullptr;   // Linear::backend_name, e.g. "packed-avx512-f32"
  const char* linear_bf16_backend = nullptr;  // e.g. "packed-avx512bf16-dpbf16"
  const QgemmTable* qgemm = nullptr;          // the quantized GEMM this variant runs
  // The processed distribution's double passes (softmax_f64.inc): the same bits on every variant.
  void (*exp_nonpositive_f64)(const double* x, int n, double* out) = nullptr;
  double (*sum_f64)(const double* x, int n) = nullptr;
  void (*divide_f64)(double* x, int n, double by) = nullptr;
  double (*scale_to_f64_and_max)(const float* logits, int n, double temperature, double* z,
                                 int* nan_count) = nullptr;
};

// The table of `isa`; throws ts::Error when this CPU lacks the variant (its entries would not run here).
const KernelTable& kernel_table(Isa isa);
// The table of active_isa(), read per kernel call (set_isa takes effect at the next call).
const KernelTable& active_kernels();
// The table of a quantized-GEMM kernel (also for one this CPU lacks: `supported` says).
const QgemmTable& qgemm_table(QgemmKernel k);

// The names of a table's entries that are null; empty for every table the fill leaves complete.
std::vector<std::string> null_entries(const KernelTable& t);
std::vector<std::string> null_entries(const QgemmTable& t);

// The draft softmax's check that the max of logits * scale is finite (ts::Error naming n), shared by the scalar and
// vector versions so both fail with the same message.
void check_softmax_max(float max_z, int n);

}  // namespace ts::kernels::cpu
