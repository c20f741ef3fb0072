// The plain-named ops of ops.h: argument checks, then the AVX-512 kernel when the CPU has it, else the scalar
// reference (ref_ops.cc). The choice is made once per process, so every row of every batch takes the same path.
#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/ops.h"

namespace ts::kernels {

namespace cpu {
void add_avx512(float* dst, const float* src, int64_t n);
void rmsnorm_avx512(const float* x, const float* weight, float* out, int rows, int dim, float eps);
void rope_avx512(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
                 float attention_scale);
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void softmax_avx512(float* x, int n);
bool attention_avx512(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                      const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
                      float scale);
}  // namespace cpu

namespace {
bool use_avx512() {
  static const bool yes = [] {
    const CpuFeatures& f = cpu_features();
    return f.avx512f && f.avx512bw && f.fma;
  }();
  return yes;
}
}  // namespace

const char* ops_isa() { return use_avx512() ? "avx512" : "scalar"; }

void add(float* dst, const float* src, int64_t n) {
  if (use_avx512()) return cpu::add_avx512(dst, src, n);
  ref::add(dst, src, n);
}

void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps) {
  TS_CHECK(rows >= 0 && dim > 0, "rmsnorm: expected rows >= 0 and dim > 0, got rows=", rows, " dim=", dim);
  if (use_avx512()) return cpu::rmsnorm_avx512(x, weight, out, rows, dim, eps);
  ref::rmsnorm(x, weight, out, rows, dim, eps);
}

void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale) {
  TS_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and positive, got ", head_dim);
  if (use_avx512()) return cpu::rope_avx512(x, positions, rows, heads, head_dim, inv_freq, attention_scale);
  ref::rope(x, positions, rows, heads, head_dim, inv_freq, attention_scale);
}

void rope_default_inv_freq(float theta, int head_dim, float* inv_freq) {
  TS_CHECK(theta > 0 && head_dim > 0 && head_dim % 2 == 0, "rope: bad theta ", theta, " or head_dim ", head_dim);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (use_avx512()) return cpu::swiglu_avx512(gate, up, out, n);
  ref::swiglu(gate, up, out, n);
}

void softmax(float* x, int n) {
  TS_CHECK(n > 0, "softmax: expected n > 0, got ", n);
  if (use_avx512()) return cpu::softmax_avx512(x, n);
  ref::softmax(x, n);
}

void attention(const float* q, const float* k, const float* v, const uint8_t* visible, float* out, int n_q, int n_kv,
               int n_heads, int n_kv_heads, int head_dim, float scale) {
  attention_strided(q, k, v, int64_t(n_kv_heads) * head_dim, head_dim, visible, out, n_q, n_kv, n_heads, n_kv_heads,
                    head_dim, scale);
}

void attention_strided(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                       const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, float scale) {
  TS_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, "attention: n_heads (", n_heads,
           ") must be a positive multiple of n_kv_heads (", n_kv_heads, ")");
  TS_CHECK(n_q >= 0 && n_kv > 0 && head_dim > 0, "attention: expected n_q >= 0, n_kv > 0, head_dim > 0, got n_q=",
           n_q, " n_kv=", n_kv, " head_dim=", head_dim);
  TS_CHECK(kv_row_stride >= 0 && kv_head_stride >= 0, "attention: strides must be >= 0, got ", kv_row_stride, ", ",
           kv_head_stride);
  if (!use_avx512())
    return ref::attention_strided(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads,
                                  n_kv_heads, head_dim, scale);
  TS_CHECK(cpu::attention_avx512(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads,
                                 head_dim, scale),
           "attention: a query row sees no key (every row of `visible` needs at least one 1)");
}

}  // namespace ts::kernels
