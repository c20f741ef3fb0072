#include "sampling/softmax_f32.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu.h"
#include "core/error.h"

// GCC 12's AVX-512 headers use _mm512_undefined_ps() and trip these warnings inside their own inlines.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ts {

namespace {

void check_max(float max_z, int n) {
  TS_CHECK(std::isfinite(max_z), "softmax: expected finite logits with at least one > -inf among ", n,
           ", max (or NaN) is ", max_z);
}

#define TS_SOFTMAX_AVX512 __attribute__((target("avx512f")))

TS_SOFTMAX_AVX512 inline __mmask16 tail(int remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << remaining) - 1);
}

// exp(x) for x <= 0 (x - max); lanes below -87.3 (including -inf) give exactly 0.
TS_SOFTMAX_AVX512 inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // Cody-Waite: ln2 = hi + lo
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

// Lane reductions through memory (GCC 12's _mm512_reduce_* trips -Wmaybe-uninitialized in its own header).
TS_SOFTMAX_AVX512 inline float lane_max(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float m = lanes[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, lanes[i]);
  return m;
}
TS_SOFTMAX_AVX512 inline float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (int i = 0; i < 16; ++i) s += lanes[i];
  return s;
}

TS_SOFTMAX_AVX512 void softmax_avx512(const float* logits, int n, float inv_temperature, float* out) {
  const __m512 scale = _mm512_set1_ps(inv_temperature);
  __m512 max_v = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 nan = 0;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 z = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, logits + i), scale);
    nan |= _mm512_mask_cmp_ps_mask(m, z, z, _CMP_UNORD_Q);
    max_v = _mm512_mask_max_ps(max_v, m, max_v, z);
  }
  TS_CHECK(nan == 0, "softmax: NaN logit");
  const float max_z = lane_max(max_v);
  check_max(max_z, n);
  const __m512 max_b = _mm512_set1_ps(max_z);
  __m512 sum = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 z = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, logits + i), scale);
    const __m512 e = _mm512_maskz_mov_ps(m, exp_nonpositive(_mm512_sub_ps(z, max_b)));
    _mm512_mask_storeu_ps(out + i, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / lane_sum(sum));
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, out + i), inv_sum));
  }
}

}  // namespace

namespace ref {
void softmax_f32(const float* logits, int n, float inv_temperature, float* out) {
  float max_z = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    TS_CHECK(!std::isnan(logits[i]), "softmax: NaN logit at ", i);
    max_z = std::max(max_z, logits[i] * inv_temperature);
  }
  check_max(max_z, n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += out[i] = std::exp(logits[i] * inv_temperature - max_z);
  const float inv_sum = static_cast<float>(1 / sum);
  for (int i = 0; i < n; ++i) out[i] *= inv_sum;
}
}  // namespace ref

void softmax_f32(const float* logits, int n, float inv_temperature, float* out) {
  TS_CHECK(n > 0, "softmax: n must be > 0, got ", n);
  TS_CHECK(inv_temperature > 0 && std::isfinite(inv_temperature), "softmax: 1/temperature must be > 0, got ",
           inv_temperature);
  static const bool avx512 = cpu_features().avx512f;
  if (avx512) {
    softmax_avx512(logits, n, inv_temperature, out);
  } else {
    ref::softmax_f32(logits, n, inv_temperature, out);
  }
}

}  // namespace ts
