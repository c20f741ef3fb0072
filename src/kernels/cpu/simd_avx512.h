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

// The bf16 bits of round_bf16's lanes (their high halves) at p[0, min(n, 16)); nothing past them is written.
TS_SIMD inline void store_bf16_bits_n(uint16_t* p, V rounded, int64_t n) {
  _mm256_mask_storeu_epi16(p, tail(n), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(rounded), 16)));
}

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

}  // namespace ts::kernels::cpu::avx512
