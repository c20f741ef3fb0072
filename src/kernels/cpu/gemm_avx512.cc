// AVX-512F GEMM on packed weights (layout in gemm_packed.h): f32 FMA for both weight types.
//
// Why not vdpbf16ps for bf16: on this project's Xeon (family 6 model 207) it retires ~1.3 G/s per core against
// ~5.4 G/s for a zmm FMA (measured, independent chains), so widening bf16 -> f32 in registers (one shift or
// one and per 16 weights) and using FMA has twice the arithmetic rate, which is what decides the cost of a tree
// batch of 8-16 rows. At 1 row both are limited by DRAM.
//
// Register tile: up to 8 rows x 2-4 panels of 16 columns = at most 16-24 zmm accumulators. Per k step the tile
// loads its weight vectors once and reuses them for every row, so a batch of 8 rows streams the weights once
// (the cost of a tree batch is then mostly the extra dot products, not extra DRAM traffic).
//
// Determinism: y[r, o] lives in one lane of one accumulator, updated in ascending k. K is walked in chunks so the
// weights of a chunk stay in L2 while all row tiles use them; between chunks the partial sums are stored to y and
// reloaded, which is exact. Nothing about this order depends on `rows`, the row tiling or the thread count.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_packed.h"

// GCC 12's AVX-512 intrinsics trip a false (maybe-)uninitialized warning on _mm512_undefined_* operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ts::kernels::cpu {
namespace {

constexpr int kMaxTileRows = 6;  // f32: 6 rows x 4 panels = 24 accumulators + 4 weights + 1 broadcast
// bf16: up to 5 rows x 4 panels (20 accumulators + 8 widened weights + 2 broadcasts), or for 6+ rows up to 8 rows
// x 2 panels (16 + 4 + 2), which widens each weight vector once per 8 rows instead of per 4 (the shift/and ops
// compete with FMAs for the same ports; 8 rows = a typical tree batch).
constexpr int kMaxTileRowsBf16Wide = 5;
constexpr int kMaxTileRowsBf16Tall = 8;
constexpr int kChunkPairs = 256;  // k pairs per chunk (bf16: 64 cols x 512 k x 2 B = 64 KiB of weights)
constexpr int kChunkK = 256;      // k per chunk (f32: 64 cols x 256 k x 4 B = 64 KiB)
// Software prefetch distance in k steps (16 x 256 B = 4 KiB ahead). Measured with weights streamed from DRAM
// on the busy shared machine: 8 rows cost 1.2-1.3x one row with it, ~1.8x without; 1 row unchanged.
constexpr int kPrefetchPairs = 16;

// Parallelise only when the work is big enough to amortise the thread hand-off (~5 us).
constexpr int64_t kParallelMinMacs = 1 << 18;  // rows x out x in

#define TS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// Lanes of panel p that hold real columns, given `cols` valid columns in the group.
inline __mmask16 panel_mask(int cols, int p) {
  int valid = std::clamp(cols - p * kLanes, 0, kLanes);
  return __mmask16((1u << valid) - 1u);
}

// y[R rows, group cols] (+)= x[R rows, 2 pairs] . w_chunk; x points at the chunk's first k of row 0 and holds
// activations already rounded to bf16 (as f32). Each weight vector holds (k even, k odd) bf16 pairs of 16 columns:
// shifting left by 16 gives the k-even weights as f32, masking the low half gives the k-odd ones. The products of
// two bf16 values are exact in f32 (as in vdpbf16ps); each k then costs one FMA rounding.
template <int R, int P>
TS_AVX512 void tile_bf16(const float* x, int ldx, const uint16_t* w, int pairs, float* y, int ldy, int cols,
                         bool first) {
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
      acc[r][p] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(panel_mask(cols, p), y + r * ldy + p * kLanes);
  const __m512i high_half = _mm512_set1_epi32(int32_t(0xffff0000u));
  for (int kp = 0; kp < pairs; ++kp) {
    const uint16_t* wk = w + size_t(kp) * kGroupCols * 2;  // [4 panels][16 lanes][2]; this tile reads P of them
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) _mm_prefetch(reinterpret_cast<const char*>(wk + kPrefetchPairs * kGroupCols * 2 + p * 32), _MM_HINT_T0);
    __m512 even[P], odd[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const __m512i pair = _mm512_load_si512(wk + p * 32);
      even[p] = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
      odd[p] = _mm512_castsi512_ps(_mm512_and_si512(pair, high_half));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xe = _mm512_set1_ps(x[size_t(r) * ldx + 2 * kp]);
      const __m512 xo = _mm512_set1_ps(x[size_t(r) * ldx + 2 * kp + 1]);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xo, odd[p], _mm512_fmadd_ps(xe, even[p], acc[r][p]));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + p * kLanes, panel_mask(cols, p), acc[r][p]);
}

template <int R>
TS_AVX512 void tile_f32(const float* x, int ldx, const float* w, int ks, float* y, int ldy, int cols, bool first) {
  __m512 acc[R][kGroupPanels];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < kGroupPanels; ++p)
      acc[r][p] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(panel_mask(cols, p), y + r * ldy + p * kLanes);
  for (int k = 0; k < ks; ++k) {
    const float* wk = w + size_t(k) * kGroupCols;  // [4 panels][16 lanes]
#pragma GCC unroll 4
    for (int p = 0; p < kGroupPanels; ++p) _mm_prefetch(reinterpret_cast<const char*>(wk + kPrefetchPairs * kGroupCols + p * 16), _MM_HINT_T0);
    __m512 w0 = _mm512_loadu_ps(wk);
    __m512 w1 = _mm512_loadu_ps(wk + 16);
    __m512 w2 = _mm512_loadu_ps(wk + 32);
    __m512 w3 = _mm512_loadu_ps(wk + 48);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 xr = _mm512_set1_ps(x[size_t(r) * ldx + k]);
      acc[r][0] = _mm512_fmadd_ps(xr, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xr, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(xr, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(xr, w3, acc[r][3]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < kGroupPanels; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + p * kLanes, panel_mask(cols, p), acc[r][p]);
}

template <typename W>
using TileFn = void (*)(const float*, int, const W*, int, float*, int, int, bool);

// Split `rows` into tiles of at most max_tile_rows, as even as possible (8 rows -> 4 + 4, not 6 + 2), so the
// number of live accumulators stays high for every tile. Only affects speed, never a row's arithmetic.
inline int tile_rows(int rows_left, int tiles_left) { return (rows_left + tiles_left - 1) / tiles_left; }

// Runs the whole GEMM: threads split column groups; each group walks K chunks, and within a chunk all row tiles.
// tiles[r] handles r rows x tile_panels panels.
template <typename W, typename Tiles>
void run_gemm(const float* x, int ldx, const W* packed, float* y, int rows, int out_features, int k_steps,
              int chunk_steps, int step_elems, int64_t weight_elems, int max_tile_rows, int tile_panels,
              const Tiles& tiles) {
  const int x_per_step = step_elems / kGroupCols;  // x elements per k step: 2 (bf16 pairs) or 1 (f32)
  const int groups = gemm_groups(out_features);
  const int n_tiles = (rows + max_tile_rows - 1) / max_tile_rows;
  const size_t group_elems = size_t(k_steps) * step_elems;
#pragma omp parallel for schedule(static) if (groups > 1 && weight_elems * rows >= kParallelMinMacs)
  for (int g = 0; g < groups; ++g) {
    const int col0 = g * kGroupCols;
    const int cols = std::min(kGroupCols, out_features - col0);
    const W* wg = packed + size_t(g) * group_elems;
    for (int k0 = 0; k0 < k_steps; k0 += chunk_steps) {
      const int ks = std::min(chunk_steps, k_steps - k0);
      int row0 = 0;
      for (int t = 0; t < n_tiles; ++t) {
        const int r = tile_rows(rows - row0, n_tiles - t);
        const float* xt = x + size_t(row0) * ldx + size_t(k0) * x_per_step;
        for (int p0 = 0; p0 < kGroupPanels && p0 * kLanes < cols; p0 += tile_panels) {
          tiles[r](xt, ldx, wg + size_t(k0) * step_elems + p0 * kLanes * x_per_step, ks,
                   y + size_t(row0) * out_features + col0 + p0 * kLanes, out_features, cols - p0 * kLanes, k0 == 0);
        }
        row0 += r;
      }
    }
  }
}

}  // namespace

void gemm_bf16_avx512(const float* x_rounded, const uint16_t* packed, float* y, int rows, int out_features,
                      int in_features) {
  static constexpr TileFn<uint16_t> wide[kMaxTileRowsBf16Wide + 1] = {
      nullptr, tile_bf16<1, 4>, tile_bf16<2, 4>, tile_bf16<3, 4>, tile_bf16<4, 4>, tile_bf16<5, 4>};
  static constexpr TileFn<uint16_t> tall[kMaxTileRowsBf16Tall + 1] = {
      nullptr,         tile_bf16<1, 2>, tile_bf16<2, 2>, tile_bf16<3, 2>, tile_bf16<4, 2>,
      tile_bf16<5, 2>, tile_bf16<6, 2>, tile_bf16<7, 2>, tile_bf16<8, 2>};
  const int kp = gemm_k_padded_bf16(in_features);
  const int64_t weights = int64_t(out_features) * in_features;
  if (rows <= kMaxTileRowsBf16Wide) {
    run_gemm<uint16_t>(x_rounded, kp, packed, y, rows, out_features, kp / 2, kChunkPairs, kGroupCols * 2, weights,
                       kMaxTileRowsBf16Wide, 4, wide);
  } else {
    run_gemm<uint16_t>(x_rounded, kp, packed, y, rows, out_features, kp / 2, kChunkPairs, kGroupCols * 2, weights,
                       kMaxTileRowsBf16Tall, 2, tall);
  }
}

void gemm_f32_avx512(const float* x, const float* packed, float* y, int rows, int out_features, int in_features) {
  static constexpr TileFn<float> tiles[kMaxTileRows + 1] = {nullptr,     tile_f32<1>, tile_f32<2>, tile_f32<3>,
                                                            tile_f32<4>, tile_f32<5>, tile_f32<6>};
  run_gemm<float>(x, in_features, packed, y, rows, out_features, in_features, kChunkK, kGroupCols,
                  int64_t(out_features) * in_features, kMaxTileRows, 4, tiles);
}

// dst = src rounded to the nearest bf16 (ties to even), kept as f32; NaN stays NaN. Same rule as f32_to_bf16.
TS_AVX512 void round_to_bf16_avx512(const float* src, float* dst, int64_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i high_half = _mm512_set1_epi32(int32_t(0xffff0000u));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, src + i);
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    __m512i rounded = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(bias, lsb)), high_half);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_and_si512(_mm512_or_si512(bits, _mm512_set1_epi32(0x400000)), high_half));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(rounded));
  }
}

}  // namespace ts::kernels::cpu
