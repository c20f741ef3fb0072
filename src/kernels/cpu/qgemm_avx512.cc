// The avx512 quantized GEMM: qgemm_avx512-inl.h compiled with and without AVX512-VNNI, and the activation
// quantizer (bit-identical to quantize_blocks_scalar: the same f32 operations, cvtps2dq rounding half to even).
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

// Blocks are quantized 16 at a time (a tile): the per-block reductions (amax, the two half sums) run as
// transpose-reductions that leave block j's value in lane j, and the divisions as one vector division, so nothing
// per block is horizontal or scalar. The same f32 operations as quantize_blocks_scalar (max and integer sums are
// exact in any order; the divisions are IEEE in both), so the same bits.
constexpr int kTileBlocks = 16;

// Lane j of the result: the reduction (max or add, `Op`) of v[j]'s 16 lanes. Four levels of pairwise combining
// (128-bit lanes across vectors, then elements within 128-bit lanes) leave block 4e + L in lane 4L + e; the last
// permutation puts block j in lane j.
template <typename Op>
TS_Q512 inline __m512 reduce_16x16(__m512 (&v)[16], Op op) {
  __m512 r[8], t[4], u[2];
  #pragma GCC unroll 8
  for (int k = 0; k < 8; ++k)  // lanes 0-1: v[2k]'s halves combined; lanes 2-3: v[2k + 1]'s
    r[k] = op(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44), _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
  #pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)  // 128-bit lane L: block 4k + L's four partials
    t[k] = op(_mm512_shuffle_f32x4(r[2 * k], r[2 * k + 1], 0x88), _mm512_shuffle_f32x4(r[2 * k], r[2 * k + 1], 0xDD));
  #pragma GCC unroll 2
  for (int k = 0; k < 2; ++k)  // lane L, elements 0-1: block 8k + L; 2-3: block 8k + 4 + L
    u[k] = op(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44), _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
  const __m512 w = op(_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[0], u[1], 0xDD));
  const __m512i to_blocks = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(to_blocks, w);
}

TS_Q512 inline __m512 max_ps(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
TS_Q512 inline __m512 add_epi32_as_ps(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// Blocks i0 .. i0 + 15 of the flat block sequence (x is [rows, in] row-major, so block i starts at x + 32 i).
TS_Q512 void quantize_tile_16(const float* x, int64_t i0, QuantizedRows* acts) {
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  __m512 amax_parts[kTileBlocks];
  #pragma GCC unroll 16
  for (int j = 0; j < kTileBlocks; ++j) {
    const float* xb = x + (i0 + j) * kQBlock;
    amax_parts[j] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(xb), sign_off),
                                  _mm512_and_ps(_mm512_loadu_ps(xb + 16), sign_off));
  }
  const __m512 amax = reduce_16x16(amax_parts, max_ps);
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  alignas(64) float id[kTileBlocks];
  _mm512_store_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), d));
  __m512 sums_lo[kTileBlocks], sums_hi[kTileBlocks];
  int8_t* q = acts->q.data();
  #pragma GCC unroll 16
  for (int j = 0; j < kTileBlocks; ++j) {
    const float* xb = x + (i0 + j) * kQBlock;
    const __m512 scale = _mm512_set1_ps(id[j]);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), scale));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), scale));
    int8_t* qb = q + (i0 + j) * kQBlock;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
    sums_lo[j] = _mm512_castsi512_ps(q0);
    sums_hi[j] = _mm512_castsi512_ps(q1);
  }
  const __m512i lo = _mm512_castps_si512(reduce_16x16(sums_lo, add_epi32_as_ps));
  const __m512i hi = _mm512_castps_si512(reduce_16x16(sums_hi, add_epi32_as_ps));
  const __m512i sum = _mm512_add_epi32(lo, hi);
  _mm512_storeu_ps(acts->d.data() + i0, d);
  _mm512_storeu_si512(acts->sum.data() + i0, sum);
  _mm512_storeu_ps(acts->dsum.data() + i0, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum)));
  int32_t* sum16 = acts->sum16.data() + 2 * i0;  // [block][lo, hi]
  _mm512_storeu_si512(sum16, _mm512_permutex2var_epi32(
                                 lo, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), hi));
  _mm512_storeu_si512(sum16 + 16, _mm512_permutex2var_epi32(
                                      lo, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), hi));
}

// One block at a time (the blocks after the last whole tile).
TS_Q512 void quantize_block(const float* x, int64_t i, QuantizedRows* acts) {
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const float* xb = x + i * kQBlock;
  const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
  const __m512 a = _mm512_max_ps(_mm512_and_ps(v0, sign_off), _mm512_and_ps(v1, sign_off));
  const float amax = _mm512_reduce_max_ps(a);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
  int8_t* qb = acts->q.data() + i * kQBlock;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
  const int32_t sum_lo = _mm512_reduce_add_epi32(q0), sum_hi = _mm512_reduce_add_epi32(q1);
  acts->d[i] = d;
  acts->sum[i] = sum_lo + sum_hi;
  acts->dsum[i] = d * float(sum_lo + sum_hi);
  acts->sum16[2 * i] = sum_lo;
  acts->sum16[2 * i + 1] = sum_hi;
}

// Rows are contiguous and in_features is a multiple of 32, so the blocks of all rows are one sequence, and every
// per-block output ([rows, blocks] arrays) is indexed by the block's place in it.
TS_Q512 void quantize_blocks_512(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts) {
  int64_t i = block_begin;
  for (; i + kTileBlocks <= block_end; i += kTileBlocks) quantize_tile_16(x, i, acts);
  for (; i < block_end; ++i) quantize_block(x, i, acts);
}

}  // namespace

namespace avx512 {

void quantize_blocks(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts) {
  quantize_blocks_512(x, block_begin, block_end, acts);
}

}  // namespace avx512
}  // namespace ts::kernels::cpu
