// Internal: the avx2 quantized GEMM (qgemm.h), included twice by qgemm_avx2.cc: with TS_Q_VNNI = 1 (vpdpbusd on
// ymm, AVX-VNNI) and 0 (its exact emulation on vpmaddubsw + vpmaddwd; Q4_0's pair sums add in int16 first,
// qgemm_avx2_shared-inl.h). A 16-output group is two 8-lane halves, one after the other; each quad's weights are
// loaded (and unpacked) once per block and reused by every row of the tile.
// Expects TS_Q_NS (namespace), TS_Q_TARGET (attribute) and TS_Q_VNNI (0 or 1).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/cpu.h"
#include "kernels/cpu/qgemm.h"

namespace ts::kernels::cpu::TS_Q_NS {
namespace {

// Software prefetch distance of the weight stream, read by each group's first row tile (the later tiles find the
// group in L1/L2, and from DRAM ask for the next group: NextGroup). A prefetch past the end of the buffer is harmless
// (it never faults).
constexpr size_t kPrefetchBytes = 2048;
// Rows per tile: 4. Both 8-lane halves' accumulators (8), the rows' integer sums (4) and one quad's weights just
// fit the 16 ymm registers; a half's accumulators are spilled around the other half where they do not. 4 rows
// beat 3 once each half broadcasts its own activation quads (activations_for_half, qgemm_avx2_shared-inl.h): M = 8
// 5-11% faster from DRAM and cache-resident, M = 4 one tile instead of 3 + 1 (docs/benchmarks.md).
constexpr int kMaxTileRows = 4;

#include "kernels/cpu/qgemm_avx2_shared-inl.h"
#include "kernels/cpu/qgemm_next_group-inl.h"

// One group's 16 outputs (two 8-lane halves) for R rows starting at row0; blocks walked in k order (qgemm.h,
// Determinism).
template <QuantType kT, int R>
TS_Q_TARGET void tile(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, int nb, float* y,
                      int ldy, int valid_lanes, bool prefetch, const NextGroup& next) {
  constexpr size_t kGroupBlockBytes = qgemm_group_block_bytes(kT);  // a block's bytes in the weight stream
  __m256 acc[2][R];  // [half][row]
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  // The weight offset's correction per row and block (qgemm.h): -8 sum for Q4_0, -128 sum for Q8_0 on VNNI.
  constexpr bool kOffset = kT == QuantType::Q4_0 || TS_Q_VNNI;
  const int32_t* offset0 = (kT == QuantType::Q4_0 ? a.sum_neg8.data() : a.sum_neg128.data()) + size_t(row0) * nb;
  for (int b = 0; b < nb; ++b) {
    const uint8_t* stream = group + size_t(b) * kGroupBlockBytes;  // where block b's bytes begin in the stream
    const uint8_t* blk_scales = group + qgemm_scales_offset(kT, nb, b);
    const uint8_t* blk_quants = group + qgemm_quants_offset(kT, nb, b);
    if (prefetch) {  // the weight stream kPrefetchBytes ahead (into the next groups at the end of this one)
      #pragma GCC unroll 8
      for (size_t line = 0; line < kGroupBlockBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(stream + kPrefetchBytes + line), _MM_HINT_T0);
    }
    if (asks_for(next, b)) prefetch_part_l2<kGroupBlockBytes>(next.bytes + size_t(b) * kGroupBlockBytes);
    const int8_t* xq = xq0 + b * kQBlock;  // row r's block at xq + r * in_features
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7 of the group
      const __m256 wscale = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk_scales + 16 * h)));
      const uint8_t* quants = blk_quants + 32 * h;  // quad j of this half at quants + 64 j
      __m256i s[R];  // per row: the block's integer sums
      if constexpr (kT == QuantType::Q4_0) {
        dot_nibble_block<R>(quants, xq, in_features, s);
      } else {
        const int8_t* xh = activations_for_half<R>(xq);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * j));  // w + 128
#if !TS_Q_VNNI
          const __m256i sign = _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80)));  // the signed weights
          w = _mm256_abs_epi8(sign);  // |w| <= 128 as uint8; the signs go onto x
#endif
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            __m256i x = broadcast_quad(xh + size_t(r) * in_features + 4 * j);
#if !TS_Q_VNNI
            x = _mm256_sign_epi8(x, sign);
#endif
            s[r] = dot_quads(s[r], w, x);
          }
        }
      }
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        if constexpr (kOffset) s[r] = _mm256_add_epi32(s[r], _mm256_set1_epi32(offset0[size_t(r) * nb + b]));
        const __m256 scale = _mm256_mul_ps(wscale, _mm256_set1_ps(dx0[size_t(r) * nb + b]));
        acc[h][r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s[r]), acc[h][r]);
      }
    }
  }
  store_half<R>(acc[0], y, ldy, valid_lanes, 0);
  if (valid_lanes > 8) store_half<R>(acc[1], y, ldy, valid_lanes, 1);
}

template <QuantType kT>
TS_Q_TARGET void groups(const QuantizedRows& a, const uint8_t* packed, float* y, int out_features, int in_features,
                        int group_begin, int group_end) {
  const int nb = in_features / kQBlock;
  const size_t gb = qgemm_group_block_bytes(kT);
  const int tiles = (a.rows + kMaxTileRows - 1) / kMaxTileRows;  // row tiles per group
  const bool ahead = ask_ahead(tiles);
  for (int g = group_begin; g < group_end; ++g) {
    const uint8_t* group = packed + size_t(g) * nb * gb;
    const int valid = std::min(kQGroup, out_features - g * kQGroup);
    float* yg = y + g * kQGroup;
    for (int row0 = 0; row0 < a.rows; row0 += kMaxTileRows) {
      const NextGroup next = ahead ? NextGroup{group + nb * gb, row0 / kMaxTileRows, tiles} : NextGroup{};
      with_tile_rows<kMaxTileRows>(std::min(kMaxTileRows, a.rows - row0), [&](auto rows) {
        tile<kT, decltype(rows)::value>(a, row0, in_features, group, nb, yg + size_t(row0) * out_features,
                                        out_features, valid, row0 == 0, next);
      });
    }
  }
}

}  // namespace

void run_groups(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end) {
  if (t == QuantType::Q8_0) return groups<QuantType::Q8_0>(a, packed, y, out_features, in_features, group_begin, group_end);
  groups<QuantType::Q4_0>(a, packed, y, out_features, in_features, group_begin, group_end);
}

}  // namespace ts::kernels::cpu::TS_Q_NS
