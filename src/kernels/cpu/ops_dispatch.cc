// The plain-named ops of ops.h: argument checks, then the active variant's kernel from its table (kernel_table.h):
// the per-ISA builds of ops-inl.h / attention-inl.h, or the scalar references (ref_ops.cc, ops_scalar.cc). The
// table is read once per call, so every row of a batch takes the same path, and set_isa switches all ops at once.
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ops.h"

namespace ts::kernels {

using cpu::active_kernels;

const char* ops_isa() { return isa_name(active_isa()); }

int simd_lanes() { return active_kernels().lanes; }

void add(float* dst, const float* src, int64_t n) { active_kernels().add(dst, src, n); }

void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps) {
  TS_CHECK(rows >= 0 && dim > 0, "rmsnorm: expected rows >= 0 and dim > 0, got rows=", rows, " dim=", dim);
  active_kernels().rmsnorm(x, weight, out, rows, dim, eps);
}

void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale) {
  TS_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and positive, got ", head_dim);
  active_kernels().rope(x, positions, rows, heads, head_dim, inv_freq, attention_scale);
}

void rope_default_inv_freq(float theta, int head_dim, float* inv_freq) {
  TS_CHECK(theta > 0 && head_dim > 0 && head_dim % 2 == 0, "rope: bad theta ", theta, " or head_dim ", head_dim);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) { active_kernels().swiglu(gate, up, out, n); }
void swiglu_rows(const float* gate_up, int rows, int inter, float* out) {
  active_kernels().swiglu_rows(gate_up, rows, inter, out);
}
void to_bf16_bits(const float* x, int64_t n, uint16_t* bits) { active_kernels().to_bf16_bits(x, n, bits); }

void softmax(float* x, int n) {
  TS_CHECK(n > 0, "softmax: expected n > 0, got ", n);
  active_kernels().softmax(x, n);
}

float scaled_max(const float* logits, int n, float scale) { return active_kernels().scaled_max(logits, n, scale); }

void exp_normalize(const float* logits, int n, float scale, float max_z, float* out) {
  active_kernels().exp_normalize(logits, n, scale, max_z, out);
}

void softmax_scaled(const float* logits, int n, float scale, float* out) {
  active_kernels().softmax_scaled(logits, n, scale, out);
}

double scale_to_f64_and_max(const float* logits, int n, double temperature, double* z, int* nan_count) {
  return active_kernels().scale_to_f64_and_max(logits, n, temperature, z, nan_count);
}

void exp_nonpositive_f64(const double* x, int n, double* out) { active_kernels().exp_nonpositive_f64(x, n, out); }

double sum_f64(const double* x, int n) { return active_kernels().sum_f64(x, n); }

void divide_f64(double* x, int n, double by) { active_kernels().divide_f64(x, n, by); }

void attention(const float* q, const float* k, const float* v, const uint8_t* visible, float* out, int n_q, int n_kv,
               int n_heads, int n_kv_heads, int head_dim, float scale) {
  attention_strided(q, k, v, int64_t(n_kv_heads) * head_dim, head_dim, visible, out, n_q, n_kv, n_heads, n_kv_heads,
                    head_dim, scale);
}

namespace {
void check_attention_shape(int64_t kv_row_stride, int64_t kv_head_stride, int n_q, int n_kv, int n_heads,
                           int n_kv_heads, int head_dim) {
  TS_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, "attention: n_heads (", n_heads,
           ") must be a positive multiple of n_kv_heads (", n_kv_heads, ")");
  TS_CHECK(n_q >= 0 && n_kv > 0 && head_dim > 0, "attention: expected n_q >= 0, n_kv > 0, head_dim > 0, got n_q=",
           n_q, " n_kv=", n_kv, " head_dim=", head_dim);
  TS_CHECK(kv_row_stride >= 0 && kv_head_stride >= 0, "attention: strides must be >= 0, got ", kv_row_stride, ", ",
           kv_head_stride);
}

// The checks around the variant's attention; `run` calls its kernel and returns false if a row saw no key.
template <typename Run>
void checked_attention(int64_t kv_row_stride, int64_t kv_head_stride, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, Run run) {
  check_attention_shape(kv_row_stride, kv_head_stride, n_q, n_kv, n_heads, n_kv_heads, head_dim);
  TS_CHECK(run(), "attention: a query row sees no key (every row of `visible` needs at least one 1)");
}
}  // namespace

void attention_strided(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                       const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, float scale) {
  checked_attention(kv_row_stride, kv_head_stride, n_q, n_kv, n_heads, n_kv_heads, head_dim, [&] {
    return active_kernels().attention(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads,
                                      n_kv_heads, head_dim, scale);
  });
}

void attention_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, const uint8_t* visible, float* out,
                      int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) {
  attention_strided_bf16kv(q, k, v, int64_t(n_kv_heads) * head_dim, int64_t(head_dim), visible, out, n_q, n_kv,
                           n_heads, n_kv_heads, head_dim, scale);
}

void attention_strided_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_row_stride,
                              int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv,
                              int n_heads, int n_kv_heads, int head_dim, float scale) {
  checked_attention(kv_row_stride, kv_head_stride, n_q, n_kv, n_heads, n_kv_heads, head_dim, [&] {
    return active_kernels().attention_bf16kv(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv,
                                             n_heads, n_kv_heads, head_dim, scale);
  });
}

namespace {
template <typename KvT, typename Kernel>
void checked_paged(Kernel kernel, const float* q, const KvT* const* pages, int page_shift, int64_t k_offset,
                   int64_t v_offset, int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv,
                   int n_heads, int n_kv_heads, int head_dim, float scale) {
  TS_CHECK(page_shift >= 0 && page_shift < 31, "attention_paged: page_shift ", page_shift, " outside [0, 31)");
  TS_CHECK(pages != nullptr && k_offset >= 0 && v_offset >= 0 && page_head_stride >= 0,
           "attention_paged: expected pages and offsets >= 0");
  checked_attention(head_dim, page_head_stride, n_q, n_kv, n_heads, n_kv_heads, head_dim, [&] {
    return kernel(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv, n_heads,
                  n_kv_heads, head_dim, scale);
  });
}
}  // namespace

void attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  checked_paged(active_kernels().attention_paged, q, pages, page_shift, k_offset, v_offset, page_head_stride, visible,
                out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

void attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  checked_paged(active_kernels().attention_paged_bf16kv, q, pages, page_shift, k_offset, v_offset, page_head_stride,
                visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

void attention_tiled(const float* q, const KVSpan* spans, int n_spans, DType kv_dtype, const uint8_t* visible,
                     float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                     const KVHeadHook* before_head) {
  TS_CHECK(kv_dtype == DType::F32 || kv_dtype == DType::BF16, "attention_tiled: K/V dtype must be F32 or BF16, got ",
           dtype_name(kv_dtype));
  TS_CHECK(n_spans > 0 && spans[0].first_row == 0, "attention_tiled: the first span must start at row 0");
  int64_t min_stride = 0;  // the smallest head stride the spans use (the shape check's stride bound)
  for (int s = 0; s < n_spans; ++s) {
    const int first = spans[s].first_row, end = s + 1 < n_spans ? spans[s + 1].first_row : n_kv;
    TS_CHECK(first % 16 == 0 && first < end, "attention_tiled: span ", s, " starts at row ", first,
             " (spans must start on a tile of 16 rows, in increasing order, below n_kv = ", n_kv, ")");
    TS_CHECK(spans[s].head_stride >= int64_t((end - first + 15) / 16) * 16 * head_dim, "attention_tiled: span ", s,
             "'s head stride ", spans[s].head_stride, " is below its ", end - first,
             " rows rounded up to tiles of 16");
    min_stride = s == 0 ? spans[s].head_stride : std::min(min_stride, spans[s].head_stride);
  }
  const auto kernel =
      kv_dtype == DType::BF16 ? active_kernels().attention_tiled_bf16kv : active_kernels().attention_tiled;
  checked_attention(head_dim, min_stride, n_q, n_kv, n_heads, n_kv_heads, head_dim, [&] {
    return kernel(q, spans, n_spans, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale, before_head);
  });
}

void attention_tiled(const float* q, const float* k, const float* v, int64_t kv_head_stride, const uint8_t* visible,
                     float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) {
  const KVSpan span{k, v, kv_head_stride, 0};
  attention_tiled(q, &span, 1, DType::F32, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

void attention_tiled(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_head_stride,
                     const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
                     float scale) {
  const KVSpan span{k, v, kv_head_stride, 0};
  attention_tiled(q, &span, 1, DType::BF16, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

void embed_rows(const void* table, DType dtype, int vocab, int dim, const int32_t* ids, int rows, float* out) {
  TS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
           "embed_rows: table dtype must be F32, F16 or BF16, got ", dtype_name(dtype));
  TS_CHECK(vocab > 0 && dim > 0, "embed_rows: expected vocab > 0 and dim > 0, got ", vocab, " and ", dim);
  const auto widen_row = active_kernels().widen_row;
  for (int r = 0; r < rows; ++r) {
    const int32_t id = ids[r];
    TS_CHECK(id >= 0 && id < vocab, "embed_rows: token id ", id, " at row ", r, " is outside the vocabulary [0, ",
             vocab, ")");
    float* dst = out + size_t(r) * dim;  // [dim]
    const size_t offset = size_t(id) * dim;
    if (dtype == DType::F32) {
      std::memcpy(dst, static_cast<const float*>(table) + offset, size_t(dim) * 4);
      continue;
    }
    const uint16_t* src = static_cast<const uint16_t*>(table) + offset;  // [dim]
    widen_row(src, dtype == DType::BF16, dim, dst);
  }
}

}  // namespace ts::kernels
