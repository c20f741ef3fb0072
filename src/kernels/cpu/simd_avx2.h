// The 8-lane AVX2 + FMA vector layer: the same interface as simd_avx512.h (read that file for the contract),
// so the kernel sources (*-inl.h) compile unchanged into namespace ts::kernels::cpu::avx2. AVX2 has no mask
// registers: a mask is a vector of all-ones / all-zeros 32-bit lanes, partial loads and stores use vmaskmovps.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define TS_SIMD_NS avx2
#define TS_SIMD_WIDTH 8
#define TS_SIMD __attribute__((target("avx2,fma,f16c")))

namespace ts::kernels::cpu::avx2 {

constexpr int kW = 8;
using V = __m256;
using VI = __m256i;
using M = __m256;  // lanes all-ones where set

TS_SIMD inline M tail(int64_t n) {
  const int k = n >= 8 ? 8 : n <= 0 ? 0 : int(n);
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
TS_SIMD inline V zero() { return _mm256_setzero_ps(); }
TS_SIMD inline V set1(float x) { return _mm256_set1_ps(x); }
TS_SIMD inline V loadu(const float* p) { return _mm256_loadu_ps(p); }
TS_SIMD inline void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
TS_SIMD inline V load_n(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, _mm256_castps_si256(tail(n)));
}
TS_SIMD inline void store_n(float* p, V v, int64_t n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, _mm256_castps_si256(tail(n)), v);
  }
}
TS_SIMD inline V add(V a, V b) { return _mm256_add_ps(a, b); }
TS_SIMD inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
TS_SIMD inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
TS_SIMD inline V div(V a, V b) { return _mm256_div_ps(a, b); }
TS_SIMD inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
TS_SIMD inline V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
TS_SIMD inline V max(V a, V b) { return _mm256_max_ps(a, b); }
TS_SIMD inline V min(V a, V b) { return _mm256_min_ps(a, b); }
TS_SIMD inline V select(M m, V yes, V no) { return _mm256_blendv_ps(no, yes, m); }
TS_SIMD inline M ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
TS_SIMD inline M is_nan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
TS_SIMD inline M mask_and(M a, M b) { return _mm256_and_ps(a, b); }
TS_SIMD inline M mask_or(M a, M b) { return _mm256_or_ps(a, b); }
TS_SIMD inline bool any(M m) { return _mm256_movemask_ps(m) != 0; }
// Fixed order: the two 128-bit halves, then pairs, then the last two.
TS_SIMD inline float reduce_add(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
TS_SIMD inline float reduce_max(V v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
TS_SIMD inline V round_nearest(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n in two exact power-of-two steps of at most 2^+-80 each (no scalef in AVX2): the first product is exact
// for |p| in [0.5, 2], the second rounds once, so results match scalef, subnormal and overflowing ones included.
// A NaN p stays NaN whatever n.
TS_SIMD inline V pow2_scale(V p, V n) {
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

TS_SIMD inline V as_float(VI v) { return _mm256_castsi256_ps(v); }
TS_SIMD inline VI as_int(V v) { return _mm256_castps_si256(v); }
TS_SIMD inline VI load_int(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
TS_SIMD inline V bf16_low_half(VI pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
TS_SIMD inline V bf16_high_half(VI pairs) { return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(int32_t(0xffff0000u)))); }
// The same with the mask read from memory by the vpand itself, so it holds no register: a tile that needs all
// 16 (6 rows x 2 panels: 12 accumulators + 2 weights + 1 broadcast) otherwise spills accumulators, since GCC
// keeps the hoisted constant in a register rather than folding it into the instruction.
alignas(32) inline constexpr uint32_t kBf16HighMask[8] = {0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                          0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};
TS_SIMD inline V bf16_high_half_mask_in_memory(VI pairs) {
  asm("vpand %1, %0, %0" : "+x"(pairs) : "m"(*reinterpret_cast<const __m256i*>(kBf16HighMask)));
  return _mm256_castsi256_ps(pairs);
}
TS_SIMD inline V load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
TS_SIMD inline V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// The first min(n, 8) bf16 values at p as f32, the rest zero; nothing past them is read (AVX2 has no 16-bit
// masked load: a short tail goes through a zeroed copy).
TS_SIMD inline V load_bf16_n(const uint16_t* p, int64_t n) {
  if (n >= 8) return load_bf16(p);
  alignas(16) uint16_t part[8] = {};
  for (int64_t i = 0; i < n; ++i) part[i] = p[i];
  return load_bf16(part);
}
TS_SIMD inline V round_bf16(V v) {
  const VI bits = _mm256_castps_si256(v);
  const VI lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const VI high_half = _mm256_set1_epi32(int32_t(0xffff0000u));
  const VI rounded = _mm256_and_si256(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), high_half);
  const VI quiet_nan = _mm256_and_si256(_mm256_or_si256(bits, _mm256_set1_epi32(0x400000)), high_half);
  return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet_nan), is_nan(v));
}

// The bf16 bits of round_bf16's lanes (their high halves) at p[0, min(n, 8)); nothing past them is written.
TS_SIMD inline void store_bf16_bits_n(uint16_t* p, V rounded, int64_t n) {
  const VI high = _mm256_srli_epi32(_mm256_castps_si256(rounded), 16);  // <= 0xffff: packs exactly
  const __m128i bits = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(high, high), 0x08));
  if (n >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
  } else if (n > 0) {
    alignas(16) uint16_t part[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(part), bits);
    std::memcpy(p, part, size_t(n) * sizeof(uint16_t));
  }
}

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

}  // namespace ts::kernels::cpu::avx2
