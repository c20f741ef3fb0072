// Internal: the avx512 K-quant GEMM (qgemm_k.h), included twice by qgemm_k_avx512.cc: with TS_Q_VNNI = 1
// (vpdpbusd, AVX512-VNNI) and 0 (its exact emulation on vpmaddubsw + vpmaddwd; the weights are unsigned and at
// most 63, so the pair sums never saturate). One zmm lane per output of the 16-output group; a tile of up to 16 rows
// (8 for Q4_K without VNNI) widens each super-block's scales and each block's weights once and reuses them for all
// its rows.
// Expects TS_Q_NS (namespace), TS_Q_TARGET (attribute) and TS_Q_VNNI (0 or 1).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/cpu.h"
#include "kernels/cpu/qgemm_k.h"

namespace ts::kernels::cpu::TS_Q_NS {
namespace {

// Rows per tile: 16 (16 accumulators and 8 weight quads fit the 32 zmm registers), as in qgemm_avx512-inl.h: a
// block's weights and scales are widened once per tile, and Q6_K's 3360-byte group super-blocks stream from DRAM
// faster than 8 rows consume them at the integer peak (optimization-notes.md, "Quantized tiles: 16 rows"). The
// emulated product (no VNNI) keeps 8 rows for Q4_K: 16 spill registers there.
template <QuantType kT>
constexpr int kMaxTileRows = kT == QuantType::Q6_K || TS_Q_VNNI ? 16 : 8;
// Two groups per tile (tile_q4k's and tile_q6k's G = 2, VNNI only) for tiles of 1 .. kMaxPairRows rows where the
// weights stream from DRAM (weights_streamed(), core/cpu.h): both groups' weight streams are read at once and each
// broadcast activation quad feeds both groups' products. From DRAM a few rows wait on the stream, and two streams
// in flight cut their cost: a 2 GB Q4_K_M model's decode step ~10% faster, 2-4 rows 7-9%, 6 rows 3%. From cache
// the pairs of 3-6 rows were ~3% dearer (more registers live) and one row's no faster in a model's step, so
// cache-resident weights keep one group (docs/results/optimization-notes.md, "Two groups per tile from DRAM: one
// row and the K-quants").
constexpr int kMaxPairRows = 6;

#include "kernels/cpu/qgemm_avx512_shared-inl.h"
#include "kernels/cpu/qgemm_k_avx512_shared-inl.h"
#include "kernels/cpu/qgemm_k_prefetch-inl.h"

// G groups' 16 outputs each (G = 1, or 2 with VNNI: `group` and the next, group_bytes apart) for R rows starting
// at row0; each output's operations are the same whatever G is, so its bits are too. The last group's first
// valid_last lanes are stored.
template <int R, int G = 1>
TS_Q_TARGET void tile_q4k(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, size_t group_bytes,
                          int ns, float* y, int ldy, int valid_last, bool prefetch) {
  static_assert(G == 1 || TS_Q_VNNI, "two groups share broadcasts only with VNNI");
  const int nb = ns * kQBlocksPerSuper;
  __m512 acc[G][R];  // [group][row]
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[g][r] = _mm512_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  const float* dsum0 = a.dsum.data() + size_t(row0) * nb;
  for (int s = 0; s < ns; ++s) {
    __m512 d[G], dmin[G];
    alignas(64) uint8_t sc[G][128], mn[G][128];  // [group][8 j][16 lanes]
    #pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      const uint8_t* sb = group + g * group_bytes + size_t(s) * kQ4KGroupSuperBytes;
      d[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
      dmin[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 32)));
      q4k_scale_bytes(sb, sc[g], mn[g]);
    }
    for (int j = 0; j < kQBlocksPerSuper; ++j) {
      const int b = s * kQBlocksPerSuper + j;
      __m512 ds[G], dm[G];
      __m512i w[G][8];
      #pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        const uint8_t* sb = group + g * group_bytes + size_t(s) * kQ4KGroupSuperBytes;
        ds[g] = scale_16(d[g], sc[g] + 16 * j);  // d * sc_j
        dm[g] = scale_16(dmin[g], mn[g] + 16 * j);  // dmin * m_j
        if (prefetch) prefetch_part<kQ4KGroupSuperBytes>(sb, j);
        unpack_nibble_quads(sb + 256 + 256 * j, w[g]);
      }
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = xq0 + size_t(r) * in_features + b * kQBlock;
        constexpr bool kFusedQ4K = R >= 2;  // from how many rows (dot_quad_at)
        // Two partial sums (even and odd quads) halve the chain of vpdpbusd latencies. One per row from 4 rows on,
        // as Q4_0 has, measured slightly slower here (the tile is not short of vector slots for the add). Two
        // groups have two chains already.
        constexpr int kChains = G == 1 ? 2 : 1;
        __m512i sum[G][kChains];
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < kChains; ++c) sum[g][c] = _mm512_setzero_si512();
        #pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) dot_quad_groups<kFusedQ4K>(sum, w, q, xq + 4 * q);
        const __m512 dx = _mm512_set1_ps(dx0[size_t(r) * nb + b]), dsum = _mm512_set1_ps(dsum0[size_t(r) * nb + b]);
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          const __m512i isum_i = kChains == 2 ? _mm512_add_epi32(sum[g][0], sum[g][kChains - 1]) : sum[g][0];
          acc[g][r] = _mm512_fmadd_ps(_mm512_mul_ps(ds[g], dx), _mm512_cvtepi32_ps(isum_i), acc[g][r]);
          acc[g][r] = _mm512_fnmadd_ps(dm[g], dsum, acc[g][r]);  // fma(-dm, dsum, acc)
        }
      }
    }
  }
  store_groups<G, R>(acc, y, ldy, valid_last);
}

// tile_q4k's shape for Q6_K: G groups (1, or 2 with VNNI) of 16 outputs for R rows, the same bits whatever G is.
template <int R, int G = 1>
TS_Q_TARGET void tile_q6k(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, size_t group_bytes,
                          int ns, float* y, int ldy, int valid_last, bool prefetch) {
  static_assert(G == 1 || TS_Q_VNNI, "two groups share broadcasts only with VNNI");
  const int nb = ns * kQBlocksPerSuper;
  __m512 acc[G][R];  // [group][row]
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[g][r] = _mm512_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  const int32_t* offset16_0 = a.sum16_neg32.data() + size_t(row0) * nb * 2;
  for (int s = 0; s < ns; ++s) {
    __m512 d[G];
    #pragma GCC unroll 2
    for (int g = 0; g < G; ++g)
      d[g] = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(group + g * group_bytes + size_t(s) * kQ6KGroupSuperBytes)));
    for (int i = 0; i < kQBlocksPerSuper; ++i) {
      const int b = s * kQBlocksPerSuper + i;
      __m512 dsc_lo[G], dsc_hi[G];
      __m512i w[G][8];  // quad q: the 6-bit levels of k = 4q..4q+3, one byte each
      #pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        const uint8_t* sb = group + g * group_bytes + size_t(s) * kQ6KGroupSuperBytes;
        // d * sc of the two 16-value halves, exact (qgemm_k.h, Arithmetic); shared by the tile's rows.
        dsc_lo[g] = _mm512_mul_ps(d[g], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 32 + 32 * i)))));
        dsc_hi[g] = _mm512_mul_ps(d[g], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 48 + 32 * i)))));
        const uint8_t* blk = sb + 288 + 384 * i;
        if (prefetch) prefetch_part<kQ6KGroupSuperBytes>(sb, i);
        #pragma GCC unroll 8
        for (int p = 0; p < 2; ++p) {
          const __m512i high = _mm512_loadu_si512(blk + 256 + 64 * p);
          const __m512i low0 = _mm512_loadu_si512(blk + 128 * p), low1 = _mm512_loadu_si512(blk + 128 * p + 64);
          w[g][2 * p] = low_nibble_or(low0, bits_4_5(_mm512_slli_epi16(high, 4)));
          w[g][2 * p + 4] = low_nibble_or(_mm512_srli_epi16(low0, 4), bits_4_5(_mm512_slli_epi16(high, 2)));
          w[g][2 * p + 1] = low_nibble_or(low1, bits_4_5(high));
          w[g][2 * p + 5] = low_nibble_or(_mm512_srli_epi16(low1, 4), bits_4_5(_mm512_srli_epi16(high, 2)));
        }
      }
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = xq0 + size_t(r) * in_features + b * kQBlock;
        const int32_t* offset16 = offset16_0 + (size_t(r) * nb + b) * 2;
        constexpr bool kFusedQ6K = R >= 4;  // from how many rows (dot_quad_at)
        // The level offset (q - 32) enters as the start value: exact integers.
        __m512i lo[G], hi[G];
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g) lo[g] = _mm512_set1_epi32(offset16[0]), hi[g] = _mm512_set1_epi32(offset16[1]);
        #pragma GCC unroll 8
        for (int q = 0; q < 4; ++q) {
          if constexpr (G == 1) {
            lo[0] = dot_quad_at<kFusedQ6K>(lo[0], w[0][q], xq + 4 * q);
            hi[0] = dot_quad_at<kFusedQ6K>(hi[0], w[0][q + 4], xq + 16 + 4 * q);
          } else {
            const __m512i x_lo = broadcast_quad(xq + 4 * q), x_hi = broadcast_quad(xq + 16 + 4 * q);
            #pragma GCC unroll 2
            for (int g = 0; g < G; ++g) {
              lo[g] = dot_quads(lo[g], w[g][q], x_lo);
              hi[g] = dot_quads(hi[g], w[g][q + 4], x_hi);
            }
          }
        }
        const __m512 dx = _mm512_set1_ps(dx0[size_t(r) * nb + b]);
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          const __m512 t = _mm512_fmadd_ps(dsc_lo[g], _mm512_cvtepi32_ps(lo[g]),
                                           _mm512_mul_ps(dsc_hi[g], _mm512_cvtepi32_ps(hi[g])));
          acc[g][r] = _mm512_fmadd_ps(t, dx, acc[g][r]);
        }
      }
    }
  }
  store_groups<G, R>(acc, y, ldy, valid_last);
}

template <QuantType kT, int R, int G = 1>
TS_Q_TARGET void tile(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, size_t group_bytes,
                      int ns, float* y, int ldy, int valid_last, bool prefetch) {
  if constexpr (kT == QuantType::Q4_K) {
    tile_q4k<R, G>(a, row0, in_features, group, group_bytes, ns, y, ldy, valid_last, prefetch);
  } else {
    tile_q6k<R, G>(a, row0, in_features, group, group_bytes, ns, y, ldy, valid_last, prefetch);
  }
}

// Rows [row_begin, row_end) of groups [group_begin, group_end); the prefetch as qgemm_avx512-inl.h's. Tiles of a few
// rows take two groups at a time where the weights stream from DRAM (kMaxPairRows).
template <QuantType kT>
TS_Q_TARGET void groups(const QuantizedRows& a, int row_begin, int row_end, const uint8_t* packed, float* y,
                        int out_features, int in_features, int group_begin, int group_end) {
  const int ns = in_features / kQSuper;
  const size_t group_bytes = size_t(ns) * qgemm_k_group_super_bytes(kT);
  [[maybe_unused]] const bool pair_groups = weights_streamed();
  for (int g = group_begin; g < group_end; ++g) {
    const uint8_t* group = packed + size_t(g) * group_bytes;
    const int valid = std::min(kQGroup, out_features - g * kQGroup);
    float* yg = y + g * kQGroup;
    if constexpr (TS_Q_VNNI) {
      const int rows = row_end - row_begin;
      if (pair_groups && g + 1 < group_end && rows >= 1 && rows <= kMaxPairRows) {
        const int valid_last = std::min(kQGroup, out_features - (g + 1) * kQGroup);
        float* y_tile = yg + size_t(row_begin) * out_features;
        with_tile_rows<kMaxPairRows>(rows, [&](auto r) {
          tile<kT, decltype(r)::value, 2>(a, row_begin, in_features, group, group_bytes, ns, y_tile, out_features,
                                          valid_last, row_begin == 0);
        });
        ++g;
        continue;
      }
    }
    for (int row0 = row_begin; row0 < row_end; row0 += kMaxTileRows<kT>) {
      with_tile_rows<kMaxTileRows<kT>>(std::min(kMaxTileRows<kT>, row_end - row0), [&](auto rows) {
        tile<kT, decltype(rows)::value>(a, row0, in_features, group, group_bytes, ns,
                                        yg + size_t(row0) * out_features, out_features, valid, row0 == 0);
      });
    }
  }
}

}  // namespace

void run_rows_k(QuantType t, const QuantizedRows& a, int row_begin, int row_end, const uint8_t* packed, float* y,
                int out_features, int in_features, int group_begin, int group_end) {
  if (t == QuantType::Q4_K) {
    return groups<QuantType::Q4_K>(a, row_begin, row_end, packed, y, out_features, in_features, group_begin,
                                   group_end);
  }
  groups<QuantType::Q6_K>(a, row_begin, row_end, packed, y, out_features, in_features, group_begin, group_end);
}

void run_groups_k(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end) {
  run_rows_k(t, a, 0, a.rows, packed, y, out_features, in_features, group_begin, group_end);
}

}  // namespace ts::kernels::cpu::TS_Q_NS
