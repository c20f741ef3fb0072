// AVX-512 versions of the row-wise and element-wise ops in ops.h. Each row (or element) is computed by the same
// instruction sequence whatever the batch size, and threads only split rows or element ranges.
#include <cmath>
#include <vector>

#include "kernels/cpu/vec_avx512.h"

namespace ts::kernels::cpu {

// Below this many elements a parallel region costs more than it saves (~5 us hand-off on this machine).
constexpr int64_t kParallelMinElems = 1 << 15;

TS_AVX512_OPS void add_avx512(float* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= 4 * kParallelMinElems)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), _mm512_maskz_loadu_ps(m, src + i)));
  }
}

TS_AVX512_OPS void rmsnorm_avx512(const float* x, const float* weight, float* out, int rows, int dim, float eps) {
#pragma omp parallel for schedule(static) if (int64_t(rows) * dim >= kParallelMinElems)
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * dim;  // [dim]
    float* outr = out + size_t(r) * dim;    // [dim], may alias xr: all reads of xr happen in dot_f32 first
    const float mean_sq = dot_f32(xr, xr, dim) / float(dim);
    const __m512 inv_rms = _mm512_set1_ps(1.0f / std::sqrt(mean_sq + eps));
    for (int i = 0; i < dim; i += 16) {
      const __mmask16 m = tail_mask(dim - i);
      // Same order as Hugging Face: (x * inv_rms) * weight.
      const __m512 normed = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), inv_rms);
      _mm512_mask_storeu_ps(outr + i, m, _mm512_mul_ps(normed, _mm512_maskz_loadu_ps(m, weight + i)));
    }
  }
}

TS_AVX512_OPS void rope_avx512(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                               const float* inv_freq, float attention_scale) {
  const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (int64_t(rows) * heads * head_dim >= kParallelMinElems)
  for (int r = 0; r < rows; ++r) {
    thread_local std::vector<float> cos_sin;  // [2, half]: cos then sin of this row's angles
    cos_sin.resize(2 * size_t(half));
    float* cos_v = cos_sin.data();
    float* sin_v = cos_sin.data() + half;
    for (int i = 0; i < half; ++i) {
      const float angle = float(positions[r]) * inv_freq[i];  // f32 product, as HF's freqs
      cos_v[i] = std::cos(angle) * attention_scale;
      sin_v[i] = std::sin(angle) * attention_scale;
    }
    for (int h = 0; h < heads; ++h) {
      float* lo = x + (size_t(r) * heads + h) * head_dim;  // [half]: x[i]
      float* hi = lo + half;                                 // [half]: x[i + half]
      for (int i = 0; i < half; i += 16) {
        const __mmask16 m = tail_mask(half - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, lo + i), b = _mm512_maskz_loadu_ps(m, hi + i);
        const __m512 c = _mm512_maskz_loadu_ps(m, cos_v + i), s = _mm512_maskz_loadu_ps(m, sin_v + i);
        _mm512_mask_storeu_ps(lo + i, m, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
        _mm512_mask_storeu_ps(hi + i, m, _mm512_add_ps(_mm512_mul_ps(b, c), _mm512_mul_ps(a, s)));
      }
    }
  }
}

TS_AVX512_OPS void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElems)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

TS_AVX512_OPS void softmax_avx512(float* x, int n) {
  __m512 max_v = _mm512_set1_ps(-INFINITY);
  for (int i = 0; i < n; i += 16) max_v = _mm512_max_ps(max_v, _mm512_mask_loadu_ps(max_v, tail_mask(n - i), x + i));
  const __m512 max_b = _mm512_set1_ps(_mm512_reduce_max_ps(max_v));
  __m512 sum = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max_b)));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv_sum));
  }
}

}  // namespace ts::kernels::cpu
