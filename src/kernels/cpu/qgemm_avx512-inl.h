// Internal: the avx512 quantized GEMM and activation quantizer (qgemm.h), included twice by qgemm_avx512.cc:
// with TS_Q_VNNI = 1 (vpdpbusd, AVX512-VNNI) and 0 (its exact emulation on vpmaddubsw + vpmaddwd). The two
// copies are compiled with different target attributes so the plain one can never contain a VNNI instruction.
// Expects TS_Q_NS (namespace), TS_Q_TARGET (attribute) and TS_Q_VNNI (0 or 1).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/qgemm.h"

namespace ts::kernels::cpu::TS_Q_NS {
namespace {

// Software prefetch distance of the weight stream, read by each group's first row tile (the later tiles find the
// group in L1/L2). A prefetch past the end of the buffer is harmless (it never faults).
constexpr size_t kPrefetchBytes = 2048;
// Rows per tile: 16 (16 accumulators and 8 weight quads fit the 32 zmm registers). A block's weights are unpacked
// once per tile (12 vector ops for Q4_0 beside each row's 11), so 16 rows halve that share; and a Q8_0 block is
// 544 bytes, which an 8-row tile at the integer peak would want at twice the read bandwidth of the CPUs measured
// (docs/results/optimization-notes.md, "Quantized tiles: 16 rows"). The emulated product (no VNNI) keeps 8 rows
// for Q4_0: 16 spill registers there.
template <QuantType kT>
constexpr int kMaxTileRows = kT == QuantType::Q8_0 || TS_Q_VNNI ? 16 : 8;

#include "kernels/cpu/qgemm_avx512_shared-inl.h"

// One group's 16 outputs for R rows starting at row0; blocks walked in k order (qgemm.h, Determinism).
template <QuantType kT, int R>
TS_Q_TARGET void tile(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, int nb, float* y,
                      int ldy, int valid_lanes, bool prefetch) {
  constexpr size_t kGroupBlockBytes = kT == QuantType::Q8_0 ? 544 : 288;
  __m512 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  // The weight offset's correction starts each block's integer sum (all but the emulated Q8_0 path use offset
  // weights: sum_k w*x = sum_k (w + o)*x - o * sum_k x).
  constexpr bool kOffset = kT == QuantType::Q4_0 || TS_Q_VNNI;
  const int32_t* offset0 = (kT == QuantType::Q4_0 ? a.sum_neg8.data() : a.sum_neg128.data()) + size_t(row0) * nb;
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = group + size_t(b) * kGroupBlockBytes;
    if (prefetch) {  // the weight stream kPrefetchBytes ahead (into the next groups at the end of this one)
      #pragma GCC unroll 8
      for (size_t line = 0; line < kGroupBlockBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes + line), _MM_HINT_T0);
    }
    const __m512 wscale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    // w[j]: 4 weights (as uint8) per lane for k = 4j..4j+3.
    __m512i w[8];
    [[maybe_unused]] __mmask64 negative[8];
    if constexpr (kT == QuantType::Q8_0) {
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        w[j] = _mm512_loadu_si512(blk + 32 + 64 * j);  // w + 128
        asm("" : "+v"(w[j]));  // a register for all the tile's rows: GCC would reload it per row beside dot_quad_at
#if !TS_Q_VNNI
        const __m512i signed_w = _mm512_xor_si512(w[j], _mm512_set1_epi8(char(0x80)));
        negative[j] = _mm512_movepi8_mask(signed_w);
        w[j] = _mm512_abs_epi8(signed_w);  // |w| <= 128 as uint8
#endif
      }
    } else {
      const __m512i low4 = _mm512_set1_epi8(0x0F);
      #pragma GCC unroll 8
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * j);
        w[j] = _mm512_and_si512(v, low4);
        w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = xq0 + size_t(r) * in_features + b * kQBlock;
      // Below 4 rows, two partial sums (even and odd quads) halve the dependent chain of vpdpbusd latencies; from 4
      // rows on, the rows' chains overlap and one sum per row saves the add. Integer, so exact either way.
      constexpr int kChains = R < 4 ? 2 : 1;
      constexpr bool kFused = R >= (kT == QuantType::Q8_0 ? 2 : 4);  // from how many rows (dot_quad_at)
      __m512i s[kChains];
      s[0] = kOffset ? _mm512_set1_epi32(offset0[size_t(r) * nb + b]) : _mm512_setzero_si512();
      if constexpr (kChains == 2) s[1] = _mm512_setzero_si512();
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
#if !TS_Q_VNNI
        if constexpr (kT == QuantType::Q8_0) {
          __m512i x = broadcast_quad(xq + 4 * j);
          x = _mm512_mask_sub_epi8(x, negative[j], _mm512_setzero_si512(), x);
          s[j % kChains] = dot_quads(s[j % kChains], w[j], x);
          continue;
        }
#endif
        s[j % kChains] = dot_quad_at<kFused>(s[j % kChains], w[j], xq + 4 * j);
      }
      if constexpr (kChains == 2) s[0] = _mm512_add_epi32(s[0], s[1]);
      const __m512 scale = _mm512_mul_ps(wscale, _mm512_set1_ps(dx0[size_t(r) * nb + b]));
      acc[r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s[0]), acc[r]);
    }
  }
  const __mmask16 mask = valid_lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid_lanes) - 1u);
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + size_t(r) * ldy, mask, acc[r]);
}

// Rows [row_begin, row_end) of groups [group_begin, group_end). The group's first row tile prefetches the weight
// stream; from a later row_begin (amx_int8's last rows) the AMX tiles have streamed the group already.
template <QuantType kT>
TS_Q_TARGET void groups(const QuantizedRows& a, int row_begin, int row_end, const uint8_t* packed, float* y,
                        int out_features, int in_features, int group_begin, int group_end) {
  const int nb = in_features / kQBlock;
  const size_t gb = qgemm_group_block_bytes(kT);
  for (int g = group_begin; g < group_end; ++g) {
    const uint8_t* group = packed + size_t(g) * nb * gb;
    const int valid = std::min(kQGroup, out_features - g * kQGroup);
    float* yg = y + g * kQGroup;
    for (int row0 = row_begin; row0 < row_end; row0 += kMaxTileRows<kT>) {
      with_tile_rows<kMaxTileRows<kT>>(std::min(kMaxTileRows<kT>, row_end - row0), [&](auto rows) {
        tile<kT, decltype(rows)::value>(a, row0, in_features, group, nb, yg + size_t(row0) * out_features,
                                        out_features, valid, row0 == 0);
      });
    }
  }
}

}  // namespace

void run_rows(QuantType t, const QuantizedRows& a, int row_begin, int row_end, const uint8_t* packed, float* y,
              int out_features, int in_features, int group_begin, int group_end) {
  if (t == QuantType::Q8_0) {
    return groups<QuantType::Q8_0>(a, row_begin, row_end, packed, y, out_features, in_features, group_begin,
                                   group_end);
  }
  groups<QuantType::Q4_0>(a, row_begin, row_end, packed, y, out_features, in_features, group_begin, group_end);
}

void run_groups(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end) {
  run_rows(t, a, 0, a.rows, packed, y, out_features, in_features, group_begin, group_end);
}

}  // namespace ts::kernels::cpu::TS_Q_NS
