// The avx2 quantized GEMM: qgemm_avx2-inl.h compiled with and without AVX-VNNI, and the activation quantizer
// (bit-identical to quantize_blocks_scalar: the same f32 operations, cvtps2dq rounding half to even).
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

#define TS_Q256 __attribute__((target("avx2,fma,f16c")))

// Blocks are quantized 8 at a time (a tile), as the avx512 quantizer does 16: the per-block reductions (amax, the
// two half sums) as transpose-reductions that leave block j's value in lane j, the divisions as one vector
// division. The same f32 operations as quantize_blocks_scalar, so the same bits.
constexpr int kTileBlocks = 8;

// Lane j of the result: the reduction (`Op`) of v[j]'s 8 lanes. Three levels of pairwise combining leave block
// 2e + L in lane 4L + e; the permutation puts block j in lane j.
template <typename Op>
TS_Q256 inline __m256 reduce_8x8(__m256 (&v)[8], Op op) {
  __m256 r[4], t[2];
  for (int k = 0; k < 4; ++k)  // 128-bit lane 0: block 2k's four partials; lane 1: block 2k + 1's
    r[k] = op(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20), _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31));
  for (int k = 0; k < 2; ++k)  // lane L, elements 0-1: block 4k + L; 2-3: block 4k + 2 + L
    t[k] = op(_mm256_shuffle_ps(r[2 * k], r[2 * k + 1], 0x44), _mm256_shuffle_ps(r[2 * k], r[2 * k + 1], 0xEE));
  const __m256 w = op(_mm256_shuffle_ps(t[0], t[1], 0x88), _mm256_shuffle_ps(t[0], t[1], 0xDD));
  return _mm256_permutevar8x32_ps(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

TS_Q256 inline __m256 max_ps(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
TS_Q256 inline __m256 add_epi32_as_ps(__m256 a, __m256 b) {
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(a), _mm256_castps_si256(b)));
}

// 32 int32 levels (|q| <= 127, or the truncated bits of an overflow, as int8_t(q) gives) -> 32 int8 in order.
TS_Q256 inline void store_levels(const __m256i (&q)[4], int8_t* out) {
  const __m256i low_byte = _mm256_set1_epi32(0xFF);  // truncation, not saturation, as the scalar cast
  const __m256i w01 = _mm256_packus_epi32(_mm256_and_si256(q[0], low_byte), _mm256_and_si256(q[1], low_byte));
  const __m256i w23 = _mm256_packus_epi32(_mm256_and_si256(q[2], low_byte), _mm256_and_si256(q[3], low_byte));
  // bytes: q0[0:4] q1[0:4] q2[0:4] q3[0:4] | q0[4:8] q1[4:8] q2[4:8] q3[4:8]
  const __m256i bytes = _mm256_packus_epi16(w01, w23);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// Blocks i0 .. i0 + 7 of the flat block sequence (x is [rows, in] row-major, so block i starts at x + 32 i).
TS_Q256 void quantize_tile_8(const float* x, int64_t i0, QuantizedRows* acts) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax_parts[kTileBlocks];
  for (int j = 0; j < kTileBlocks; ++j) {
    const float* xb = x + (i0 + j) * kQBlock;
    __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb), abs_mask);
    for (int i = 1; i < 4; ++i) a = _mm256_max_ps(a, _mm256_and_ps(_mm256_loadu_ps(xb + 8 * i), abs_mask));
    amax_parts[j] = a;
  }
  const __m256 d = _mm256_div_ps(reduce_8x8(amax_parts, max_ps), _mm256_set1_ps(127.0f));
  const __m256 nonzero = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_OQ);
  alignas(32) float id[kTileBlocks];
  _mm256_store_ps(id, _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d), nonzero));
  __m256 sums_lo[kTileBlocks], sums_hi[kTileBlocks];
  for (int j = 0; j < kTileBlocks; ++j) {
    const float* xb = x + (i0 + j) * kQBlock;
    const __m256 scale = _mm256_set1_ps(id[j]);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), scale));
    store_levels(q, acts->q.data() + (i0 + j) * kQBlock);
    sums_lo[j] = _mm256_castsi256_ps(_mm256_add_epi32(q[0], q[1]));
    sums_hi[j] = _mm256_castsi256_ps(_mm256_add_epi32(q[2], q[3]));
  }
  const __m256i lo = _mm256_castps_si256(reduce_8x8(sums_lo, add_epi32_as_ps));
  const __m256i hi = _mm256_castps_si256(reduce_8x8(sums_hi, add_epi32_as_ps));
  const __m256i sum = _mm256_add_epi32(lo, hi);
  _mm256_storeu_ps(acts->d.data() + i0, d);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acts->sum.data() + i0), sum);
  _mm256_storeu_ps(acts->dsum.data() + i0, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sum)));
  const __m256i pairs_a = _mm256_unpacklo_epi32(lo, hi), pairs_b = _mm256_unpackhi_epi32(lo, hi);
  int32_t* sum16 = acts->sum16.data() + 2 * i0;  // [block][lo, hi]
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sum16), _mm256_permute2x128_si256(pairs_a, pairs_b, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sum16 + 8), _mm256_permute2x128_si256(pairs_a, pairs_b, 0x31));
}

// One block at a time (the blocks after the last whole tile).
TS_Q256 void quantize_block(const float* x, int64_t i, QuantizedRows* acts) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const float* xb = x + i * kQBlock;
  __m256 v[4];
  __m256 a = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(xb + 8 * k);
    a = _mm256_max_ps(a, _mm256_and_ps(v[k], abs_mask));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, a);
  float amax = 0.0f;
  for (float l : lanes) amax = std::max(amax, l);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
  store_levels(q, acts->q.data() + i * kQBlock);
  alignas(32) int32_t s8[2][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s8[0]), _mm256_add_epi32(q[0], q[1]));
  _mm256_store_si256(reinterpret_cast<__m256i*>(s8[1]), _mm256_add_epi32(q[2], q[3]));
  int32_t half[2] = {0, 0};
  for (int h = 0; h < 2; ++h)
    for (int32_t s : s8[h]) half[h] += s;
  acts->d[i] = d;
  acts->sum[i] = half[0] + half[1];
  acts->dsum[i] = d * float(half[0] + half[1]);
  acts->sum16[2 * i] = half[0];
  acts->sum16[2 * i + 1] = half[1];
}

// Rows are contiguous and in_features is a multiple of 32: the blocks of all rows are one sequence, and every
// per-block output ([rows, blocks] arrays) is indexed by the block's place in it.
TS_Q256 void quantize_blocks_256(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts) {
  int64_t i = block_begin;
  for (; i + kTileBlocks <= block_end; i += kTileBlocks) quantize_tile_8(x, i, acts);
  for (; i < block_end; ++i) quantize_block(x, i, acts);
}

}  // namespace

namespace avx2 {

void quantize_blocks(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts) {
  quantize_blocks_256(x, block_begin, block_end, acts);
}

}  // namespace avx2
}  // namespace ts::kernels::cpu
