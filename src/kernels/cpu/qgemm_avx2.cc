// The avx2 quantized GEMM: qgemm_avx2-inl.h compiled with and without AVX-VNNI, and the activation quantizer
// (bit-identical to quantize_rows_scalar: the same f32 operations, cvtps2dq rounding half to even).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/qgemm.h"

#define TS_Q_NS avx2_plain
#define TS_Q_TARGET __attribute__((target("avx2,fma,f16c")))
#define TS_Q_VNNI 0
#include "kernels/cpu/qgemm_avx2-inl.h"
#undef TS_Q_NS
#undef TS_Q_TARGET
#undef TS_Q_VNNI

#define TS_Q_NS avx2_vnni
#define TS_Q_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define TS_Q_VNNI 1
#include "kernels/cpu/qgemm_avx2-inl.h"

namespace ts::kernels::cpu {

namespace {

__attribute__((target("avx2,fma,f16c"))) void quantize_rows_256(const float* x, int rows, int in_features,
                                                                 QuantizedRows* acts) {
  const int nb = in_features / kQBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < nb; ++b) {
      const float* xb = x + size_t(r) * in_features + b * kQBlock;
      __m256 v[4];
      __m256 a = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        a = _mm256_max_ps(a, _mm256_and_ps(v[i], abs_mask));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, a);
      float amax = 0.0f;
      for (float l : lanes) amax = std::max(amax, l);
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int8_t* qb = acts->q.data() + size_t(r) * in_features + b * kQBlock;
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};  // values 0..15, 16..31
      alignas(32) int32_t q32[32];
      for (int i = 0; i < 4; ++i) {
        const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
        sum[i / 2] = _mm256_add_epi32(sum[i / 2], q);
        _mm256_store_si256(reinterpret_cast<__m256i*>(q32 + 8 * i), q);
      }
      for (int k = 0; k < kQBlock; ++k) qb[k] = int8_t(q32[k]);
      int32_t half[2] = {0, 0};
      for (int h = 0; h < 2; ++h) {
        alignas(32) int32_t s8[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(s8), sum[h]);
        for (int32_t s : s8) half[h] += s;
      }
      acts->d[size_t(r) * nb + b] = d;
      acts->sum[size_t(r) * nb + b] = half[0] + half[1];
      acts->dsum[size_t(r) * nb + b] = d * float(half[0] + half[1]);
      acts->sum16[(size_t(r) * nb + b) * 2] = half[0];
      acts->sum16[(size_t(r) * nb + b) * 2 + 1] = half[1];
    }
  }
}

}  // namespace

namespace avx2 {

void quantize_rows(const float* x, int rows, int in_features, QuantizedRows* acts) {
  acts->rows = rows;
  acts->blocks = in_features / kQBlock;
  acts->q.resize(size_t(rows) * in_features);
  acts->d.resize(size_t(rows) * acts->blocks);
  acts->sum.resize(size_t(rows) * acts->blocks);
  acts->sum16.resize(size_t(rows) * acts->blocks * 2);
  acts->dsum.resize(size_t(rows) * acts->blocks);
  quantize_rows_256(x, rows, in_features, acts);
}

}  // namespace avx2
}  // namespace ts::kernels::cpu
