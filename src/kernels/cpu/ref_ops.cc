// Scalar references for ops.h: direct transcriptions of the definitions, accumulating in double. They are the
// yardstick for the fast versions (tests/kernels) and the scalar variant's kernels (kernel_table.cc).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ops.h"

namespace ts::kernels::ref {

void add(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * dim;  // [dim]
    float* outr = out + size_t(r) * dim;    // [dim]
    double sum_sq = 0.0;
    for (int i = 0; i < dim; ++i) sum_sq += double(xr[i]) * xr[i];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / dim + eps);
    for (int i = 0; i < dim; ++i) outr[i] = float(double(xr[i]) * inv_rms * weight[i]);
  }
}

// Angles in float exactly as Hugging Face computes them (inv_freq and pos * inv_freq in float32), then the
// rotation in double.
void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale) {
  TS_CHECK(head_dim % 2 == 0, "rope: head_dim must be even, got ", head_dim);
  const int half = head_dim / 2;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < half; ++i) {
      const float angle = float(positions[r]) * inv_freq[i];
      const double c = std::cos(double(angle)) * attention_scale, s = std::sin(double(angle)) * attention_scale;
      for (int h = 0; h < heads; ++h) {
        float* xh = x + (size_t(r) * heads + h) * head_dim;  // [head_dim]
        const double a = xh[i], b = xh[i + half];
        xh[i] = float(a * c - b * s);
        xh[i + half] = float(b * c + a * s);
      }
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void softmax(float* x, int n) {
  double max_v = x[0];
  for (int i = 1; i < n; ++i) max_v = std::max(max_v, double(x[i]));
  std::vector<double> e(n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += e[i] = std::exp(double(x[i]) - max_v);
  for (int i = 0; i < n; ++i) x[i] = float(e[i] / sum);
}

void softmax_scaled(const float* logits, int n, float scale, float* out) {
  float max_z = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    TS_CHECK(!std::isnan(logits[i]), "softmax: NaN logit at ", i);
    max_z = std::max(max_z, logits[i] * scale);
  }
  cpu::check_softmax_max(max_z, n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += out[i] = std::exp(logits[i] * scale - max_z);
  const float inv_sum = static_cast<float>(1 / sum);
  for (int i = 0; i < n; ++i) out[i] *= inv_sum;
}

void attention(const float* q, const float* k, const float* v, const uint8_t* visible, float* out, int n_q, int n_kv,
               int n_heads, int n_kv_heads, int head_dim, float scale) {
  attention_strided(q, k, v, int64_t(n_kv_heads) * head_dim, head_dim, visible, out, n_q, n_kv, n_heads, n_kv_heads,
                    head_dim, scale);
}

namespace {
inline double kv_value(float x) { return x; }
inline double kv_value(uint16_t bits) { return bf16_to_f32(bits); }

template <typename KvT>
void attention_kv(const float* q, const KvT* k, const KvT* v, int64_t kv_row_stride, int64_t kv_head_stride,
                  const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
                  float scale) {
  TS_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "attention: n_heads (", n_heads,
           ") must be a multiple of n_kv_heads (", n_kv_heads, ")");
  const int group = n_heads / n_kv_heads;
  std::vector<double> score(n_kv), acc(head_dim);
  for (int i = 0; i < n_q; ++i) {
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = q + (size_t(i) * n_heads + h) * head_dim;  // [head_dim]
      const int kvh = h / group;
      double max_s = -INFINITY;
      for (int j = 0; j < n_kv; ++j) {
        if (!visible[size_t(i) * n_kv + j]) continue;
        const KvT* kj = k + j * kv_row_stride + kvh * kv_head_stride;  // [head_dim]
        double dot = 0.0;
        for (int d = 0; d < head_dim; ++d) dot += double(qh[d]) * kv_value(kj[d]);
        score[j] = dot * scale;
        max_s = std::max(max_s, score[j]);
      }
      TS_CHECK(max_s > -INFINITY, "attention: query row ", i, " sees no key");
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < n_kv; ++j) {
        if (!visible[size_t(i) * n_kv + j]) continue;
        const double p = std::exp(score[j] - max_s);
        sum += p;
        const KvT* vj = v + j * kv_row_stride + kvh * kv_head_stride;  // [head_dim]
        for (int d = 0; d < head_dim; ++d) acc[d] += p * kv_value(vj[d]);
      }
      float* oh = out + (size_t(i) * n_heads + h) * head_dim;  // [head_dim]
      for (int d = 0; d < head_dim; ++d) oh[d] = float(acc[d] / sum);
    }
  }
}
}  // namespace

namespace {
// The paged rows gathered into one head-major buffer pair, then the strided reference.
template <typename KvT>
void attention_paged_kv(const float* q, const KvT* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                        int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                        int n_kv_heads, int head_dim, float scale) {
  TS_CHECK(page_shift >= 0 && page_shift < 31 && n_kv > 0 && n_kv_heads > 0 && head_dim > 0,
           "attention_paged: bad shape");
  std::vector<KvT> k(size_t(n_kv_heads) * n_kv * head_dim), v(k.size());  // [kv_heads, n_kv, head_dim]
  const int64_t mask = (int64_t(1) << page_shift) - 1;
  for (int g = 0; g < n_kv_heads; ++g)
    for (int j = 0; j < n_kv; ++j) {
      const int64_t at = g * page_head_stride + (j & mask) * head_dim;
      const size_t to = (size_t(g) * n_kv + j) * head_dim;
      std::copy_n(pages[j >> page_shift] + k_offset + at, head_dim, k.begin() + to);
      std::copy_n(pages[j >> page_shift] + v_offset + at, head_dim, v.begin() + to);
    }
  attention_kv(q, k.data(), v.data(), int64_t(head_dim), int64_t(n_kv) * head_dim, visible, out, n_q, n_kv, n_heads,
               n_kv_heads, head_dim, scale);
}
}  // namespace

void attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  attention_paged_kv(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv, n_heads,
                     n_kv_heads, head_dim, scale);
}
void attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  attention_paged_kv(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv, n_heads,
                     n_kv_heads, head_dim, scale);
}

namespace {
// The spans' rows gathered into head-major rows (keys out of their tiles), then the strided reference.
template <typename KvT>
void attention_tiled_kv(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out, int n_q,
                        int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) {
  TS_CHECK(n_kv > 0 && n_kv_heads > 0 && head_dim > 0 && n_spans > 0, "attention_tiled: bad shape");
  const size_t head_rows = size_t(n_kv) * head_dim;
  std::vector<KvT> k_rows(size_t(n_kv_heads) * head_rows), v_rows(k_rows.size());  // [kv_heads, n_kv, head_dim]
  for (int s = 0; s < n_spans; ++s) {
    const int first = spans[s].first_row, end = s + 1 < n_spans ? spans[s + 1].first_row : n_kv;
    const KvT* k = static_cast<const KvT*>(spans[s].k);
    const KvT* v = static_cast<const KvT*>(spans[s].v);
    for (int g = 0; g < n_kv_heads; ++g)
      for (int j = first; j < end; ++j) {
        const int r = j - first;
        const size_t head = size_t(g) * spans[s].head_stride, to = size_t(g) * head_rows + size_t(j) * head_dim;
        for (int d = 0; d < head_dim; ++d) {
          k_rows[to + d] = k[head + size_t(r >> 4) * 16 * head_dim + size_t(d) * 16 + (r & 15)];
          v_rows[to + d] = v[head + size_t(r) * head_dim + d];
        }
      }
  }
  attention_kv(q, k_rows.data(), v_rows.data(), int64_t(head_dim), int64_t(head_rows), visible, out, n_q, n_kv,
               n_heads, n_kv_heads, head_dim, scale);
}
}  // namespace

void attention_tiled(const float* q, const KVSpan* spans, int n_spans, DType kv_dtype, const uint8_t* visible,
                     float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) {
  if (kv_dtype == DType::BF16)
    attention_tiled_kv<uint16_t>(q, spans, n_spans, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
  else
    attention_tiled_kv<float>(q, spans, n_spans, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

void attention_strided(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
                       const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads,
                       int head_dim, float scale) {
  attention_kv(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

void attention_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, const uint8_t* visible, float* out,
                      int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) {
  attention_kv(q, k, v, int64_t(n_kv_heads) * head_dim, int64_t(head_dim), visible, out, n_q, n_kv, n_heads,
               n_kv_heads, head_dim, scale);
}

void attention_strided_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_row_stride,
                              int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv,
                              int n_heads, int n_kv_heads, int head_dim, float scale) {
  attention_kv(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

}  // namespace ts::kernels::ref
