// Internal: the avx512 quantized GEMM and activation quantizer (qgemm.h), included twice by qgemm_avx512.cc:
// with TS_Q_VNNI = 1 (vpdpbusd, AVX512-VNNI) and 0 (its exact emulation on vpmaddubsw + vpmaddwd). The two
// copies are compiled with different target attributes so the plain one can never contain a VNNI instruction.
// Expects TS_Q_NS (namespace), TS_Q_TARGET (attribute) and TS_Q_VNNI (0 or 1).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/cpu.h"
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

// A Q8_0 block's kN quant vectors (64 bytes each) from q = its scales + 32. Its blocks are 544 bytes, so every other
// block's quants start half-way into a cache line. Tiles of up to kMaxRealignRows rows, which wait on the weight
// stream more than they compute, read those as whole aligned lines (the one holding the scales, kN - 1 more and the
// first half of the next) shifted into place, rather than as loads split across two lines: a model's decode step
// from DRAM is faster so (docs/results/optimization-notes.md, "Quantized tiles: aligned loads of a block's quants").
// 16-row tiles compute more than they wait and keep the plain loads. Q4_0's quants fill whole lines in its runs
// (qgemm.h; only a short last run of an odd block count starts half-way), and its tiles load them plainly.
constexpr int kMaxRealignRows = 8;
template <int kN>
TS_Q_TARGET inline void load_quants(const uint8_t* q, bool realign, __m512i (&v)[kN]) {
  if (realign && (reinterpret_cast<uintptr_t>(q) & 63) == 32) {
    const uint8_t* line = q - 32;  // 64-byte aligned
    __m512i lo = _mm512_load_si512(line);
    #pragma GCC unroll 8
    for (int j = 0; j < kN; ++j) {
      // The last line's first half only: the block (or the buffer) may end there.
      const __m512i hi =
          j + 1 < kN ? _mm512_load_si512(line + 64 * (j + 1))
                     : _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(line + 64 * (j + 1))));
      v[j] = _mm512_alignr_epi64(hi, lo, 4);  // bytes 32..63 of lo, then 0..31 of hi
      lo = hi;
    }
    return;
  }
  #pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) v[j] = _mm512_loadu_si512(q + 64 * j);
}

// Two groups per tile (tile's G = 2, VNNI only) for tiles of kMinPairRows .. kMaxPairRows<kT> rows: both groups'
// weight streams are read at once and each broadcast activation quad feeds both groups' products. A few rows from
// DRAM wait on the weight stream more than they compute, and two streams in flight cut their cost (Q4_0 at 4 rows
// from ~1.2x one row to ~1.05x; cache-resident, unchanged: docs/results/optimization-notes.md, "Two groups per
// tile"). A 16-row Q4_0 tile of two groups spills its 32 accumulators and was slower, so Q4_0 pairs up to 8 rows.
// One row pairs too where the weights stream from DRAM (weights_streamed(), core/cpu.h): a 2 GB model's Q4_0 decode
// step 5% faster, Q8_0's unchanged (docs/results/optimization-notes.md, "Two groups per tile from DRAM: one row and
// the K-quants").
constexpr int kMinPairRows = 2;
template <QuantType kT>
constexpr int kMaxPairRows = kT == QuantType::Q8_0 ? 16 : 8;

// The f16 scales of a Q4_0 run of n blocks (at `scales`, [n][16]) as f32 into out[n][16], a whole run unrolled.
TS_Q_TARGET inline void convert_run_scales(const uint8_t* scales, int n, float (*out)[kQGroup]) {
  const __m256i* h = reinterpret_cast<const __m256i*>(scales);
  if (n == kQRunBlocks) {
    #pragma GCC unroll 8
    for (int j = 0; j < kQRunBlocks; ++j) _mm512_store_ps(out[j], _mm512_cvtph_ps(_mm256_loadu_si256(h + j)));
    return;
  }
  for (int j = 0; j < n; ++j) _mm512_store_ps(out[j], _mm512_cvtph_ps(_mm256_loadu_si256(h + j)));
}

// G groups' 16 outputs each (G = 1, or 2 with VNNI: `group` and the next, group_bytes apart) for
// R rows starting at row0; blocks walked in k order (qgemm.h, Determinism): each output's operations are the same
// whatever G is, so its bits are too. The last group's first valid_last lanes are stored.
template <QuantType kT, int R, int G = 1>
TS_Q_TARGET void tile(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, size_t group_bytes,
                      int nb, float* y, int ldy, int valid_last, bool prefetch) {
  static_assert(G == 1 || TS_Q_VNNI, "two groups share broadcasts only with VNNI");
  constexpr size_t kGroupBlockBytes = qgemm_group_block_bytes(kT);  // a block's bytes in the weight stream
  __m512 acc[G][R];  // [group][row]
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[g][r] = _mm512_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  // The weight offset's correction starts each block's integer sum (all but the emulated Q8_0 path use offset
  // weights: sum_k w*x = sum_k (w + o)*x - o * sum_k x).
  constexpr bool kOffset = kT == QuantType::Q4_0 || TS_Q_VNNI;
  const int32_t* offset0 = (kT == QuantType::Q4_0 ? a.sum_neg8.data() : a.sum_neg128.data()) + size_t(row0) * nb;
  // Q4_0 tiles of up to kMaxRealignRows rows, which wait on the weight stream, go run by run (qgemm.h): they convert
  // a run's scales when it starts and read them back per block. Converting each block's where the block starts
  // streamed a one-row product from DRAM ~20% slower (optimization-notes.md, "Q4_0 in runs of 8 blocks"). 16-row
  // tiles compute more than they wait and, as Q8_0's, convert per block in one pass.
  constexpr bool kRunScales = kT == QuantType::Q4_0 && R <= kMaxRealignRows;
  constexpr int kRun = kRunScales ? kQRunBlocks : 1 << 30;  // blocks per pass of the outer loop
  [[maybe_unused]] alignas(64) float run_scales[G][kQRunBlocks][kQGroup];  // [group][block in run][lane]
  for (int run = 0; run < nb; run += kRun) {
    const int run_end = int(std::min<int64_t>(nb, int64_t(run) + kRun));
    const size_t run_quants = qgemm_quants_offset(kT, nb, run);  // Q4_0: where the run's quants start in a group
    if constexpr (kRunScales) {
      #pragma GCC unroll 2
      for (int g = 0; g < G; ++g)
        convert_run_scales(group + g * group_bytes + qgemm_scales_offset(kT, nb, run), run_end - run, run_scales[g]);
    }
    for (int b = run; b < run_end; ++b) {
      __m512 wscale[G];
      // w[g][j]: 4 weights (as uint8) per lane for k = 4j..4j+3.
      __m512i w[G][8];
      [[maybe_unused]] __mmask64 negative[8];
      #pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        const uint8_t* g_bytes = group + g * group_bytes;
        if (prefetch) {  // the weight stream kPrefetchBytes ahead (into the next groups at the end of this one)
          const uint8_t* stream = g_bytes + size_t(b) * kGroupBlockBytes;  // where block b's bytes begin
          #pragma GCC unroll 8
          for (size_t line = 0; line < kGroupBlockBytes; line += 64)
            _mm_prefetch(reinterpret_cast<const char*>(stream + kPrefetchBytes + line), _MM_HINT_T0);
        }
        const uint8_t* quants =
            g_bytes + (kRunScales ? run_quants + 256 * size_t(b - run) : qgemm_quants_offset(kT, nb, b));
        if constexpr (kRunScales) {
          wscale[g] = _mm512_load_ps(run_scales[g][b - run]);
        } else {
          const uint8_t* scales = g_bytes + qgemm_scales_offset(kT, nb, b);
          wscale[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
        }
        if constexpr (kT == QuantType::Q8_0) {
          load_quants(quants, R <= kMaxRealignRows, w[g]);  // w + 128
          #pragma GCC unroll 8
          for (int j = 0; j < 8; ++j) {
            // A register for all the tile's rows: GCC would reload it per row beside dot_quad_at.
            asm("" : "+v"(w[g][j]));
#if !TS_Q_VNNI
            const __m512i signed_w = _mm512_xor_si512(w[g][j], _mm512_set1_epi8(char(0x80)));
            negative[j] = _mm512_movepi8_mask(signed_w);
            w[g][j] = _mm512_abs_epi8(signed_w);  // |w| <= 128 as uint8
#endif
          }
        } else {
          unpack_nibble_quads(quants, w[g]);
        }
      }
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = xq0 + size_t(r) * in_features + b * kQBlock;
        // Below 4 rows, two partial sums (even and odd quads) halve the dependent chain of vpdpbusd latencies; from 4
        // rows on, the rows' chains overlap and one sum per row saves the add. Integer, so exact either way.
        constexpr int kChains = R < 4 && G == 1 ? 2 : 1;
        constexpr bool kFused = R >= (kT == QuantType::Q8_0 ? 2 : 4);  // from how many rows (dot_quad_at)
        __m512i s[G][kChains];
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          s[g][0] = kOffset ? _mm512_set1_epi32(offset0[size_t(r) * nb + b]) : _mm512_setzero_si512();
          if constexpr (kChains == 2) s[g][1] = _mm512_setzero_si512();
        }
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
#if !TS_Q_VNNI
          if constexpr (kT == QuantType::Q8_0) {
            __m512i x = broadcast_quad(xq + 4 * j);
            x = _mm512_mask_sub_epi8(x, negative[j], _mm512_setzero_si512(), x);
            s[0][j % kChains] = dot_quads(s[0][j % kChains], w[0][j], x);
            continue;
          }
#endif
          dot_quad_groups<kFused>(s, w, j, xq + 4 * j);
        }
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          if constexpr (kChains == 2) s[g][0] = _mm512_add_epi32(s[g][0], s[g][1]);
          const __m512 scale = _mm512_mul_ps(wscale[g], _mm512_set1_ps(dx0[size_t(r) * nb + b]));
          acc[g][r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s[g][0]), acc[g][r]);
        }
      }
    }
  }
  store_groups<G, R>(acc, y, ldy, valid_last);
}

// Rows [row_begin, row_end) of groups [group_begin, group_end). The group's first row tile prefetches the weight
// stream; from a later row_begin (amx_int8's last rows) the AMX tiles have streamed the group already. With VNNI,
// groups go two at a time, each row tile over both (one call where the tile pairs its rows' groups).
template <QuantType kT>
TS_Q_TARGET void groups(const QuantizedRows& a, int row_begin, int row_end, const uint8_t* packed, float* y,
                        int out_features, int in_features, int group_begin, int group_end) {
  const int nb = in_features / kQBlock;
  const size_t group_bytes = size_t(nb) * qgemm_group_block_bytes(kT);
  constexpr int kGroupsAtOnce = TS_Q_VNNI ? 2 : 1;
  [[maybe_unused]] const bool pair_one_row = weights_streamed();
  for (int g = group_begin; g < group_end; g += kGroupsAtOnce) {
    const int n = std::min(kGroupsAtOnce, group_end - g);  // groups g .. g + n - 1
    const uint8_t* group = packed + size_t(g) * group_bytes;
    const int valid_last = std::min(kQGroup, out_features - (g + n - 1) * kQGroup);
    float* yg = y + g * kQGroup;
    for (int row0 = row_begin; row0 < row_end; row0 += kMaxTileRows<kT>) {
      float* y_tile = yg + size_t(row0) * out_features;
      with_tile_rows<kMaxTileRows<kT>>(std::min(kMaxTileRows<kT>, row_end - row0), [&](auto rows) {
        constexpr int kR = decltype(rows)::value;
        if constexpr (TS_Q_VNNI && kR <= kMaxPairRows<kT>) {
          if (n == 2 && (kR >= kMinPairRows || pair_one_row)) {
            return tile<kT, kR, 2>(a, row0, in_features, group, group_bytes, nb, y_tile, out_features, valid_last,
                                   row0 == 0);
          }
        }
        for (int h = 0; h < n; ++h)
          tile<kT, kR>(a, row0, in_features, group + h * group_bytes, group_bytes, nb, y_tile + h * kQGroup,
                       out_features, h == n - 1 ? valid_last : kQGroup, row0 == 0);
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
