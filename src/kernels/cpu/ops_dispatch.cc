// The plain-named ops of ops.h: argument checks, then the kernel of the active ISA variant (core/cpu.h):
// the per-ISA builds of ops-inl.h / attention-inl.h, or the scalar references (ref_ops.cc). The variant is read
// per call, so every row of a batch takes the same path, and set_isa switches all ops at once.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/ops.h"

namespace ts::kernels {

namespace {
enum class Path { Scalar, Avx2, Avx512 };
// The ops have no bf16-specific kernel: avx512bf16 runs the avx512 ones.
inline Path path() {
  switch (active_isa()) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
    case Isa::Amx: return Path::Avx512;
    case Isa::Avx2: return Path::Avx2;
    case Isa::Scalar: break;
  }
  return Path::Scalar;
}
}  // namespace

const char* ops_isa() { return isa_name(active_isa()); }

int simd_lanes() {
  switch (path()) {
    case Path::Avx512: return 16;
    case Path::Avx2: return 8;
    case Path::Scalar: break;
  }
  return 1;
}


void add(float* dst, const float* src, int64_t n) {
  switch (path()) {
    case Path::Avx512: return cpu::avx512::add(dst, src, n);
    case Path::Avx2: return cpu::avx2::add(dst, src, n);
    case Path::Scalar: return ref::add(dst, src, n);
  }
}

void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps) {
  TS_CHECK(rows >= 0 && dim > 0, "rmsnorm: expected rows >= 0 and dim > 0, got rows=", rows, " dim=", dim);
  switch (path()) {
    case Path::Avx512: return cpu::avx512::rmsnorm(x, weight, out, rows, dim, eps);
    case Path::Avx2: return cpu::avx2::rmsnorm(x, weight, out, rows, dim, eps);
    case Path::Scalar: return ref::rmsnorm(x, weight, out, rows, dim, eps);
  }
}

void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale) {
  TS_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and positive, got ", head_dim);
  switch (path()) {
    case Path::Avx512: return cpu::avx512::rope(x, positions, rows, heads, head_dim, inv_freq, attention_scale);
    case Path::Avx2: return cpu::avx2::rope(x, positions, rows, heads, head_dim, inv_freq, attention_scale);
    case Path::Scalar: return ref::rope(x, positions, rows, heads, head_dim, inv_freq, attention_scale);
  }
}

void rope_default_inv_freq(float theta, int head_dim, float* inv_freq) {
  TS_CHECK(theta > 0 && head_dim > 0 && head_dim % 2 == 0, "rope: bad theta ", theta, " or head_dim ", head_dim);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  switch (path()) {
    case Path::Avx512: return cpu::avx512::swiglu(gate, up, out, n);
    case Path::Avx2: return cpu::avx2::swiglu(gate, up, out, n);
    case Path::Scalar: return ref::swiglu(gate, up, out, n);
  }
}

void softmax(float* x, int n) {
  TS_CHECK(n > 0, "softmax: expected n > 0, got ", n);
  switch (path()) {
    case Path::Avx512: return cpu::avx512::softmax(x, n);
    case Path::Avx2: return cpu::avx2::softmax(x, n);
    case Path::Scalar: return ref::softmax(x, n);
  }
}

float scaled_max(const float* logits, int n, float scale) {
  switch (path()) {
    case Path::Avx512: return cpu::avx512::scaled_max(logits, n, scale);
    case Path::Avx2: return cpu::avx2::scaled_max(logits, n, scale);
    case Path::Scalar: break;
  }
  float max_z = -INFINITY;
  for (int i = 0; i < n; ++i) {
    const float z = logits[i] * scale;
    if (std::isnan(z)) return NAN;
    max_z = std::max(max_z, z);
  }
  return max_z;
}

void exp_normalize(const float* logits, int n, float scale, float max_z, float* out) {
  switch (path()) {
    case Path::Avx512: return cpu::avx512::exp_normalize(logits, n, scale, max_z, out);
    case Path::Avx2: return cpu::avx2::exp_normalize(logits, n, scale, max_z, out);
    case Path::Scalar: break;
  }
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float z = logits[i] * scale - max_z;
    sum += out[i] = z < -87.3f ? 0.0f : std::exp(z);
  }
  const float inv_sum = float(1 / sum);
  for (int i = 0; i < n; ++i) out[i] *= inv_sum;
}

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

// The SIMD variants' attention over K/V of element type KvT (float, or bf16 bits), or `scalar` (the reference).
template <typename KvT, typename Scalar>
void dispatch_attention(const float* q, const KvT* k, const KvT* v, int64_t kv_row_stride, int64_t kv_head_stride,
                        const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                        int head_dim, float scale, Scalar scalar) {
  check_attention_shape(kv_row_stride, kv_head_stride, n_q, n_kv, n_heads, n_kv_heads, head_dim);
  bool every_row_sees_a_key = true;
  switch (path()) {
    case Path::Avx512:
      every_row_sees_a_key = cpu::avx512::attention(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv,
                                                    n_heads, n_kv_heads, head_dim, scale);
      break;
    case Path::Avx2:
      every_row_sees_a_key = cpu::avx2::attention(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv,
                                                  n_heads, n_kv_heads, head_dim, scale);
      break;
    case Path::Scalar: return scalar();
  }
  TS_CHECK(every_row_sees_a_key, "attention: a query row sees no key (every row of `visible` needs at least one 1)");
}
}  // namespace

void attention_strided(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                       const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, float scale) {
  dispatch_attention(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim,
                     scale, [&] {
                       ref::attention_strided(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv,
                                              n_heads, n_kv_heads, head_dim, scale);
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
  dispatch_attention(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim,
                     scale, [&] {
                       ref::attention_strided_bf16kv(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv,
                                                     n_heads, n_kv_heads, head_dim, scale);
                     });
}

void embed_rows(const void* table, DType dtype, int vocab, int dim, const int32_t* ids, int rows, float* out) {
  TS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
           "embed_rows: table dtype must be F32, F16 or BF16, got ", dtype_name(dtype));
  TS_CHECK(vocab > 0 && dim > 0, "embed_rows: expected vocab > 0 and dim > 0, got ", vocab, " and ", dim);
  const Path p = path();
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
    const bool is_bf16 = dtype == DType::BF16;
    switch (p) {
      case Path::Avx512: cpu::avx512::widen_row(src, is_bf16, dim, dst); break;
      case Path::Avx2: cpu::avx2::widen_row(src, is_bf16, dim, dst); break;
      case Path::Scalar:
        for (int i = 0; i < dim; ++i) dst[i] = is_bf16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
        break;
    }
  }
}

}  // namespace ts::kernels
