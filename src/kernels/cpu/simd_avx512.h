// The 16-lane AVX-512 vector layer the per-ISA kernel sources are written against (see simd_avx2.h for the same
// interface in 8 lanes). Include it first in a file that then includes a kernel source (*-inl.h): the kernel is
// compiled into namespace ts::kernels::cpu::avx512 with every function carrying TS_SIMD.
//
// Every operation is lane-wise or a fixed-order reduction, so an element's arithmetic depends only on its lane
// (position mod 16) and the buffer length, never on the batch around it.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12's _mm512_reduce_* and _mm512_undefined_* trip a false (maybe-)uninitialized warning in its headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_SIMD_NS avx512
#define TS_SIMD_WIDTH 16
#define TS_SIMD __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace ts::kernels::cpu::avx512 {

constexpr int kW = 16;  // f32 lanes
using V = __m512;
using VI = __m512i;
using M = __mmask16;

// Lanes [0, n) of a vector, n clamped to [0, 16].
TS_SIMD inline M tail(int64_t n) { return n >= 16 ? M(0xffff) : n <= 0 ? M(0) : M((1u << n) - 1u); }
TS_SIMD inline V zero() { return _mm512_setzero_ps(); }
TS_SIMD inline V set1(float x) { return _mm512_set1_ps(x); }
TS_SIMD inline V loadu(const float* p) { return _mm512_loadu_ps(p); }
TS_SIMD inline void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
// The first min(n, 16) floats at p (the rest of the vector zero; nothing past them is read).
TS_SIMD inline V load_n(const float* p, int64_t n) { return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(tail(n), p); }
// Writes the first min(n, 16) lanes of v to p.
TS_SIMD inline void store_n(float* p, V v, int64_t n) {
  if (n >= 16) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, tail(n), v);
  }
}
TS_SIMD inline V add(V a, V b) { return _mm512_add_ps(a, b); }
TS_SIMD inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
TS_SIMD inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
TS_SIMD inline V div(V a, V b) { return _mm512_div_ps(a, b); }
TS_SIMD inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }    // a b + c, one rounding
TS_SIMD inline V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b, one rounding
// max/min return b where either is NaN (x86 semantics): max(c, x) propagates a NaN x.
TS_SIMD inline V max(V a, V b) { return _mm512_max_ps(a, b); }
TS_SIMD inline V min(V a, V b) { return _mm512_min_ps(a, b); }
TS_SIMD inline V select(M m, V yes, V no) { return _mm512_mask_blend_ps(m, no, yes); }
TS_SIMD inline M ge(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
TS_SIMD inline M is_nan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
TS_SIMD inline M mask_and(M a, M b) { return M(a & b); }
TS_SIMD inline M mask_or(M a, M b) { return M(a | b); }
TS_SIMD inline bool any(M m) { return m != 0; }
TS_SIMD inline float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
TS_SIMD inline float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
// out[u] = the sum of the lanes of v_u, u = 0..3, every u with the same order: 16 -> 8 (lane l + l+8),
// 8 -> 4 (l + l+4), then ((x0 + x1) + (x2 + x3)). Four reductions share the shuffles of one.
TS_SIMD inline __m128 fold_to_4(V v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
}
TS_SIMD inline void reduce_add4(V v0, V v1, V v2, V v3, float* out) {
  const __m128 b0 = fold_to_4(v0), b1 = fold_to_4(v1), b2 = fold_to_4(v2), b3 = fold_to_4(v3);
  _mm_storeu_ps(out, _mm_hadd_ps(_mm_hadd_ps(b0, b1), _mm_hadd_ps(b2, b3)));
}
// out[n] = reduce_add4's sum of v[n]'s lanes, n = 0..15, with the same additions on the same operands (so the
// same bits), done for 16 vectors side by side: 45 shuffles and adds against 100 for four reduce_add4 calls.
//   1. pairs of vectors: [v lanes 0-7 | w lanes 0-7] + [v lanes 8-15 | w lanes 8-15]  (l + l+8)
//   2. pairs of those: one 128-bit lane per vector, lanes 0-3 + lanes 4-7            (l + l+4)
//   3. within 128-bit lanes: (x0 + x1), (x2 + x3), then their sum                    (hadd, hadd)
TS_SIMD inline void reduce_add16(const V* v, float* out) {
  V t[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m)
    t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  V u[4];  // u[j]'s 128-bit lane k: the four partial sums of v[4j + k]
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
    u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  const V h01 = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const V h23 = _mm512_add_ps(_mm512_shuffle_ps(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane 4k + e: the sum of v[4e + k].
  const V r = _mm512_add_ps(_mm512_shuffle_ps(h01, h23, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_ps(h01, h23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i to_n = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_permutexvar_ps(to_n, r));
}
TS_SIMD inline V round_nearest(V v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n for integral n in [-160, 160] (one rounding: exact unless the result is subnormal or overflows).
TS_SIMD inline V pow2_scale(V p, V n) { return _mm512_scalef_ps(p, n); }

// Integer views, for bf16 bits.
TS_SIMD inline V as_float(VI v) { return _mm512_castsi512_ps(v); }
TS_SIMD inline VI as_int(V v) { return _mm512_castps_si512(v); }
TS_SIMD inline VI load_int(const void* p) { return _mm512_loadu_si512(p); }
// 16 lanes of (k even, k odd) bf16 pairs -> the k-even values / the k-odd values as f32.
TS_SIMD inline V bf16_low_half(VI pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)); }
TS_SIMD inline V bf16_high_half(VI pairs) { return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int32_t(0xffff0000u)))); }
TS_SIMD inline V bf16_high_half_mask_in_memory(VI pairs) { return bf16_high_half(pairs); }  // 32 registers: no need
// 16 bf16 / f16 values at p -> f32 (exact conversions).
TS_SIMD inline V load_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
TS_SIMD inline V load_f16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
// The first min(n, 16) bf16 values at p as f32, the rest zero; nothing past them is read (one masked load).
TS_SIMD inline V load_bf16_n(const uint16_t* p, int64_t n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail(n), p)), 16));
}
// v rounded to the nearest bf16 (ties to even), kept as f32; NaN stays a (quiet) NaN. Same rule as f32_to_bf16.
TS_SIMD inline V round_bf16(V v) {
  const VI bits = _mm512_castps_si512(v);
  const VI lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const VI high_half = _mm512_set1_epi32(int32_t(0xffff0000u));
  VI rounded = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), high_half);
  const VI quiet_nan = _mm512_and_si512(_mm512_or_si512(bits, _mm512_set1_epi32(0x400000)), high_half);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(rounded, is_nan(v), quiet_nan));
}

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

}  // namespace ts::kernels::cpu::avx512
