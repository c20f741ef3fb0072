// Internal: the avx2 K-quant GEMM (qgemm_k.h), included twice by qgemm_k_avx2.cc: with TS_Q_VNNI = 1 (vpdpbusd
// on ymm, AVX-VNNI) and 0 (its exact emulation on vpmaddubsw + vpmaddwd; weights <= 63, no saturation, pair sums
// added in int16 first: qgemm_avx2_shared-inl.h). A 16-output group is two 8-lane halves, one after the other;
// each quad's weights are unpacked once per block and reused by every row of the tile (up to 4), the scales once
// per super-block (Q4_K) or block (Q6_K).
// Expects TS_Q_NS (namespace), TS_Q_TARGET (attribute) and TS_Q_VNNI (0 or 1).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/cpu.h"
#include "kernels/cpu/qgemm_k.h"

namespace ts::kernels::cpu::TS_Q_NS {
namespace {

#include "kernels/cpu/qgemm_k_prefetch-inl.h"

// Rows per tile: 4, as qgemm_avx2-inl.h (M = 8 9-11% faster than 3 rows for Q4_K and Q6_K from DRAM).
constexpr int kMaxTileRows = 4;

#include "kernels/cpu/qgemm_avx2_shared-inl.h"
#include "kernels/cpu/qgemm_next_group-inl.h"

// (a & 0x0F) | (b & 0x30) per byte.
TS_Q_TARGET inline __m256i low_nibble_or_bits_4_5(__m256i a, __m256i b) {
  return _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi8(0x0F)), _mm256_and_si256(b, _mm256_set1_epi8(0x30)));
}

TS_Q_TARGET inline __m256 widen_u8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

TS_Q_TARGET inline __m256i widen_i8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

TS_Q_TARGET inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Q4_K's 6-bit scales and mins of one group super-block as bytes: sc, mn: [8 j][16 lanes].
TS_Q_TARGET inline void unpack_q4k_scales(const uint8_t* sb, uint8_t* sc, uint8_t* mn) {
  #pragma GCC unroll 2
  for (int q = 0; q < 2; ++q) {  // sub-blocks 2q, 2q + 1 and 4 + 2q, 5 + 2q
    const __m256i lo_a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 64 + 32 * q));
    const __m256i lo_b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 128 + 32 * q));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 192 + 32 * q));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc + 32 * q), low_nibble_or_bits_4_5(lo_a, _mm256_slli_epi16(hi, 4)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc + 64 + 32 * q), low_nibble_or_bits_4_5(lo_b, hi));
    _mm256_store_si256(reinterpret_cast<__m256i*>(mn + 32 * q),
                       low_nibble_or_bits_4_5(_mm256_srli_epi16(lo_a, 4), _mm256_slli_epi16(hi, 2)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(mn + 64 + 32 * q),
                       low_nibble_or_bits_4_5(_mm256_srli_epi16(lo_b, 4), _mm256_srli_epi16(hi, 2)));
  }
}

// One Q4_K group's 16 outputs (two 8-lane halves) for R rows (qgemm_k.h, Arithmetic): per sub-block and half, the
// rows' int16 pair sums (4-bit weights: all 8 quads fit) from one quad pair's weights at a time.
template <int R>
TS_Q_TARGET void tile_q4k(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, int ns, float* y,
                          int ldy, int valid_lanes, bool prefetch, const NextGroup& next) {
  const int nb = ns * kQBlocksPerSuper;
  __m256 acc[2][R];  // [half][row]
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  const float* dsum0 = a.dsum.data() + size_t(row0) * nb;
  for (int s = 0; s < ns; ++s) {
    const uint8_t* sb = group + size_t(s) * kQ4KGroupSuperBytes;
    alignas(32) uint8_t sc[128], mn[128];
    unpack_q4k_scales(sb, sc, mn);
    for (int j = 0; j < kQBlocksPerSuper; ++j) {
      const int b = s * kQBlocksPerSuper + j;
      if (prefetch) prefetch_part<kQ4KGroupSuperBytes>(sb, j);
      if (asks_for(next, b))
        prefetch_part_l2<kQ4KGroupSuperBytes / 8>(next.bytes + size_t(b) * (kQ4KGroupSuperBytes / 8));
      const int8_t* xq = xq0 + b * kQBlock;  // row r's block at xq + r * in_features
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7 of the group
        const uint8_t* quants = sb + 256 + 256 * j + 32 * h;  // quads i (low nibbles) and i + 4 (high) at + 64 i
        __m256i sums[R];
        dot_nibble_block<R>(quants, xq, in_features, sums);
        const __m256 ds = _mm256_mul_ps(load_f16x8(sb + 16 * h), widen_u8(sc + 16 * j + 8 * h));       // exact
        const __m256 dm = _mm256_mul_ps(load_f16x8(sb + 32 + 16 * h), widen_u8(mn + 16 * j + 8 * h));  // exact
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 dx = _mm256_set1_ps(dx0[size_t(r) * nb + b]);
          acc[h][r] = _mm256_fmadd_ps(_mm256_mul_ps(ds, dx), _mm256_cvtepi32_ps(sums[r]), acc[h][r]);
          acc[h][r] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(dsum0[size_t(r) * nb + b]), acc[h][r]);  // fma(-dm, dsum, acc)
        }
      }
    }
  }
  store_half<R>(acc[0], y, ldy, valid_lanes, 0);
  if (valid_lanes > 8) store_half<R>(acc[1], y, ldy, valid_lanes, 1);
}

// One Q6_K group's 16 outputs for R rows (qgemm_k.h, Arithmetic). Per block and half, the 16 values with k >= 16
// first: their product dsc_hi * float(hi) is the addend of the fma that adds the k < 16 values' product, so it
// waits in t[r] while those integer sums form. 6-bit weights: two quads per int16 pair sum.
template <int R>
TS_Q_TARGET void tile_q6k(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, int ns, float* y,
                          int ldy, int valid_lanes, bool prefetch, const NextGroup& next) {
  const int nb = ns * kQBlocksPerSuper;
  __m256 acc[2][R];  // [half][row]
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  const int32_t* offset16_0 = a.sum16_neg32.data() + size_t(row0) * nb * 2;  // -32 * sum16 (qgemm.h)
  for (int s = 0; s < ns; ++s) {
    const uint8_t* sb = group + size_t(s) * kQ6KGroupSuperBytes;
    for (int i = 0; i < kQBlocksPerSuper; ++i) {
      const int b = s * kQBlocksPerSuper + i;
      if (prefetch) prefetch_part<kQ6KGroupSuperBytes>(sb, i);
      if (asks_for(next, b))
        prefetch_part_l2<kQ6KGroupSuperBytes / 8>(next.bytes + size_t(b) * (kQ6KGroupSuperBytes / 8));
      const int8_t* xq = xq0 + b * kQBlock;  // row r's block at xq + r * in_features
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7 of the group
        const uint8_t* blk = sb + 288 + 384 * i + 32 * h;
        const __m256 d = load_f16x8(sb + 16 * h);
        const int8_t* xh = activations_for_half<R>(xq);
        __m256 t[R];  // dsc_hi * float(hi), then fma(dsc_lo, float(lo), that)
        #pragma GCC unroll 2
        for (int half = 1; half >= 0; --half) {  // k >= 16 (quads 4..7), then k < 16 (quads 0..3)
          __m256i sums[R];  // the level offset (q - 32) enters as the start value: exact integers
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r) sums[r] = _mm256_set1_epi32(offset16_0[(size_t(r) * nb + b) * 2 + half]);
          #pragma GCC unroll 2
          for (int p = 0; p < 2; ++p) {  // quads 4 half + 2p and 4 half + 2p + 1
            const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 256 + 64 * p));
            const __m256i low0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 * p));
            const __m256i low1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 * p + 64));
            const __m256i w0 = half ? low_nibble_or_bits_4_5(_mm256_srli_epi16(low0, 4), _mm256_slli_epi16(high, 2))
                                    : low_nibble_or_bits_4_5(low0, _mm256_slli_epi16(high, 4));
            const __m256i w1 = half ? low_nibble_or_bits_4_5(_mm256_srli_epi16(low1, 4), _mm256_srli_epi16(high, 2))
                                    : low_nibble_or_bits_4_5(low1, high);
            #pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
              const int8_t* x = xh + size_t(r) * in_features + 16 * half + 8 * p;
              const __m256i pairs = add_small_quad(add_small_quad(_mm256_setzero_si256(), w0, broadcast_quad(x)),
                                                   w1, broadcast_quad(x + 4));
              sums[r] = _mm256_add_epi32(sums[r], widen_small_sums(pairs));
            }
          }
          // d * sc of this 16-value half, exact (qgemm_k.h, Arithmetic); shared by the tile's rows.
          const __m256 dsc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(widen_i8(sb + 32 + 32 * i + 16 * half + 8 * h)));
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            t[r] = half ? _mm256_mul_ps(dsc, _mm256_cvtepi32_ps(sums[r]))
                        : _mm256_fmadd_ps(dsc, _mm256_cvtepi32_ps(sums[r]), t[r]);
          }
        }
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          acc[h][r] = _mm256_fmadd_ps(t[r], _mm256_set1_ps(dx0[size_t(r) * nb + b]), acc[h][r]);
      }
    }
  }
  store_half<R>(acc[0], y, ldy, valid_lanes, 0);
  if (valid_lanes > 8) store_half<R>(acc[1], y, ldy, valid_lanes, 1);
}

template <QuantType kT, int R>
TS_Q_TARGET void tile(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, int ns, float* y,
                      int ldy, int valid_lanes, bool prefetch, const NextGroup& next) {
  if constexpr (kT == QuantType::Q4_K) {
    tile_q4k<R>(a, row0, in_features, group, ns, y, ldy, valid_lanes, prefetch, next);
  } else {
    tile_q6k<R>(a, row0, in_features, group, ns, y, ldy, valid_lanes, prefetch, next);
  }
}

template <QuantType kT>
TS_Q_TARGET void groups(const QuantizedRows& a, const uint8_t* packed, float* y, int out_features, int in_features,
                        int group_begin, int group_end) {
  const int ns = in_features / kQSuper;
  const size_t gsb = qgemm_k_group_super_bytes(kT);
  const int tiles = (a.rows + kMaxTileRows - 1) / kMaxTileRows;  // row tiles per group
  const bool ahead = ask_ahead(tiles);
  for (int g = group_begin; g < group_end; ++g) {
    const uint8_t* group = packed + size_t(g) * ns * gsb;
    const int valid = std::min(kQGroup, out_features - g * kQGroup);
    float* yg = y + g * kQGroup;
    for (int row0 = 0; row0 < a.rows; row0 += kMaxTileRows) {
      const NextGroup next = ahead ? NextGroup{group + ns * gsb, row0 / kMaxTileRows, tiles} : NextGroup{};
      with_tile_rows<kMaxTileRows>(std::min(kMaxTileRows, a.rows - row0), [&](auto rows) {
        tile<kT, decltype(rows)::value>(a, row0, in_features, group, ns, yg + size_t(row0) * out_features,
                                        out_features, valid, row0 == 0, next);
      });
    }
  }
}

}  // namespace

void run_groups_k(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end) {
  if (t == QuantType::Q4_K) {
    return groups<QuantType::Q4_K>(a, packed, y, out_features, in_features, group_begin, group_end);
  }
  groups<QuantType::Q6_K>(a, packed, y, out_features, in_features, group_begin, group_end);
}

}  // namespace ts::kernels::cpu::TS_Q_NS
