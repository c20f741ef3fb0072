// The avx512 quantized GEMM: qgemm_avx512-inl.h compiled with and without AVX512-VNNI, and the activation
// quantizer (bit-identical to quantize_rows_scalar: the same f32 operations, cvtps2dq rounding half to even).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/qgemm.h"

// GCC 12's _mm512_reduce_* trip a false (maybe-)uninitialized warning in its headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_Q_NS avx512_plain
#define TS_Q_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define TS_Q_VNNI 0
#include "kernels/cpu/qgemm_avx512-inl.h"
#undef TS_Q_NS
#undef TS_Q_TARGET
#undef TS_Q_VNNI

#define TS_Q_NS avx512_vnni
#define TS_Q_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni")))
#define TS_Q_VNNI 1
#include "kernels/cpu/qgemm_avx512-inl.h"

namespace ts::kernels::cpu {

namespace {

#define TS_Q512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

TS_Q512 void quantize_rows_512(const float* x, int rows, int in_features, QuantizedRows* acts) {
  const int nb = in_features / kQBlock;
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < nb; ++b) {
      const float* xb = x + size_t(r) * in_features + b * kQBlock;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const __m512 a = _mm512_max_ps(_mm512_and_ps(v0, sign_off), _mm512_and_ps(v1, sign_off));
      const float amax = _mm512_reduce_max_ps(a);
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
      int8_t* qb = acts->q.data() + size_t(r) * in_features + b * kQBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
      acts->d[size_t(r) * nb + b] = d;
      const int32_t sum_lo = _mm512_reduce_add_epi32(q0), sum_hi = _mm512_reduce_add_epi32(q1);
      acts->sum[size_t(r) * nb + b] = sum_lo + sum_hi;
      acts->dsum[size_t(r) * nb + b] = d * float(sum_lo + sum_hi);
      acts->sum16[(size_t(r) * nb + b) * 2] = sum_lo;
      acts->sum16[(size_t(r) * nb + b) * 2 + 1] = sum_hi;
    }
  }
}

}  // namespace

namespace avx512 {

void quantize_rows(const float* x, int rows, int in_features, QuantizedRows* acts) {
  acts->rows = rows;
  acts->blocks = in_features / kQBlock;
  acts->q.resize(size_t(rows) * in_features);
  acts->d.resize(size_t(rows) * acts->blocks);
  acts->sum.resize(size_t(rows) * acts->blocks);
  acts->sum16.resize(size_t(rows) * acts->blocks * 2);
  acts->dsum.resize(size_t(rows) * acts->blocks);
  quantize_rows_512(x, rows, in_features, acts);
}

}  // namespace avx512
}  // namespace ts::kernels::cpu
