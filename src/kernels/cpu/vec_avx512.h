// Internal AVX-512 helpers shared by the op kernels. Include only from files whose functions carry TS_AVX512_OPS.
//
// Batch invariance: every helper is applied per vector with masked tails (never a scalar tail loop), so an
// element's arithmetic does not depend on where it falls in a buffer or on the buffer's length.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12's _mm512_reduce_add_ps/_max_ps trip a false (maybe-)uninitialized warning inside avx512fintrin.h.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_AVX512_OPS __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace ts::kernels::cpu {

// Lanes [0, n) of a 16-lane vector, n in [0, 16].
TS_AVX512_OPS inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }

// exp(x) for f32, Cephes-style: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, then scale by 2^n. ~2 ulp.
// Inputs below -104 (including -inf) give +0, above ~88.7 +inf (via scalef), NaN stays NaN.
TS_AVX512_OPS inline __m512 exp512(__m512 x) {
  // max(c, x) returns x when x is NaN (maxps returns its second operand on NaN), so NaN propagates.
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(100.0f), x);  // keeps n finite; 2^145 still overflows to inf in scalef
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Sum of x[0, n) with 16 lane-wise partial sums, then a fixed-order horizontal reduction. The grouping depends
// only on n.
TS_AVX512_OPS inline float sum_f32(const float* x, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_add_ps(acc);
}

// dot(a, b) over [0, n) with one accumulator of 16 lanes (FMA), fixed horizontal reduction.
TS_AVX512_OPS inline float dot_f32(const float* a, const float* b, int n) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace ts::kernels::cpu
