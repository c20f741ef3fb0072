// AVX-512 GEMM on packed weights (layout in gemm_packed.h). bf16 uses vdpbf16ps (AVX512_BF16), f32 uses FMA.
//
// Register tile: up to kMaxTileRows rows x 4 panels of 16 columns = at most 24 zmm accumulators. Per k step the
// tile loads 4 weight vectors once and reuses them for every row, so a batch of 8 rows streams the weights once
// (the cost of a tree batch is then mostly the extra dot products, not extra DRAM traffic).
//
// Determinism: y[r, o] lives in one lane of one accumulator, updated in ascending k. K is walked in chunks so the
// weights of a chunk stay in L2 while all row tiles use them; between chunks the partial sums are stored to y and
// reloaded, which is exact. Nothing about this order depends on `rows`, the row tiling or the thread count.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_packed.h"

namespace ts::kernels::cpu {
namespace {

constexpr int kMaxTileRows = 6;
constexpr int kChunkPairs = 256;  // k pairs per chunk (bf16: 64 cols x 512 k x 2 B = 64 KiB of weights)
constexpr int kChunkK = 256;      // k per chunk (f32: 64 cols x 256 k x 4 B = 64 KiB)

// Parallelise only when the weights are big enough to amortise the thread hand-off (~5 us).
constexpr int64_t kParallelMinWeights = 1 << 16;

#define TS_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define TS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// Lanes of panel p that hold real columns, given `cols` valid columns in the group.
inline __mmask16 panel_mask(int cols, int p) {
  int valid = std::clamp(cols - p * kLanes, 0, kLanes);
  return __mmask16((1u << valid) - 1u);
}

// y[R rows, group cols] (+)= x[R rows, pairs] . w_chunk; x points at the chunk's first pair of row 0.
template <int R>
TS_AVX512_BF16 void tile_bf16(const uint16_t* x, int ldx, const uint16_t* w, int pairs, float* y, int ldy, int cols,
                              bool first) {
  __m512 acc[R][kGroupPanels];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < kGroupPanels; ++p)
      acc[r][p] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(panel_mask(cols, p), y + r * ldy + p * kLanes);
  for (int kp = 0; kp < pairs; ++kp) {
    const uint16_t* wk = w + size_t(kp) * kGroupCols * 2;  // [4 panels][16 lanes][2]
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(wk);
    __m512bh w1 = (__m512bh)_mm512_loadu_si512(wk + 32);
    __m512bh w2 = (__m512bh)_mm512_loadu_si512(wk + 64);
    __m512bh w3 = (__m512bh)_mm512_loadu_si512(wk + 96);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      __builtin_memcpy(&pair, x + size_t(r) * ldx + 2 * kp, 4);
      __m512bh xr = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xr, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xr, w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xr, w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xr, w3);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < kGroupPanels; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + p * kLanes, panel_mask(cols, p), acc[r][p]);
}

template <int R>
TS_AVX512 void tile_f32(const float* x, int ldx, const float* w, int ks, float* y, int ldy, int cols, bool first) {
  __m512 acc[R][kGroupPanels];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < kGroupPanels; ++p)
      acc[r][p] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(panel_mask(cols, p), y + r * ldy + p * kLanes);
  for (int k = 0; k < ks; ++k) {
    const float* wk = w + size_t(k) * kGroupCols;  // [4 panels][16 lanes]
    __m512 w0 = _mm512_loadu_ps(wk);
    __m512 w1 = _mm512_loadu_ps(wk + 16);
    __m512 w2 = _mm512_loadu_ps(wk + 32);
    __m512 w3 = _mm512_loadu_ps(wk + 48);
    for (int r = 0; r < R; ++r) {
      __m512 xr = _mm512_set1_ps(x[size_t(r) * ldx + k]);
      acc[r][0] = _mm512_fmadd_ps(xr, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xr, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(xr, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(xr, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < kGroupPanels; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + p * kLanes, panel_mask(cols, p), acc[r][p]);
}

template <typename T>
using TileFn = void (*)(const T*, int, const T*, int, float*, int, int, bool);

// Split `rows` into tiles of at most kMaxTileRows, as even as possible (8 rows -> 4 + 4, not 6 + 2), so the
// number of live accumulators stays high for every tile. Only affects speed, never a row's arithmetic.
inline int tile_rows(int rows_left, int tiles_left) { return (rows_left + tiles_left - 1) / tiles_left; }

// Runs the whole GEMM: threads split column groups; each group walks K chunks, and within a chunk all row tiles.
template <typename T, typename Tiles>
void run_gemm(const T* x, int ldx, const T* packed, float* y, int rows, int out_features, int k_steps,
              int chunk_steps, int step_elems, int64_t weight_elems, const Tiles& tiles) {
  const int groups = gemm_groups(out_features);
  const int n_tiles = (rows + kMaxTileRows - 1) / kMaxTileRows;
  const size_t group_elems = size_t(k_steps) * step_elems;
#pragma omp parallel for schedule(static) if (groups > 1 && weight_elems >= kParallelMinWeights)
  for (int g = 0; g < groups; ++g) {
    const int col0 = g * kGroupCols;
    const int cols = std::min(kGroupCols, out_features - col0);
    const T* wg = packed + size_t(g) * group_elems;
    for (int k0 = 0; k0 < k_steps; k0 += chunk_steps) {
      const int ks = std::min(chunk_steps, k_steps - k0);
      int row0 = 0;
      for (int t = 0; t < n_tiles; ++t) {
        const int r = tile_rows(rows - row0, n_tiles - t);
        // ldx elems per row; a k step covers (step_elems / kGroupCols) x elements (2 for bf16 pairs, 1 for f32).
        const T* xt = x + size_t(row0) * ldx + size_t(k0) * (step_elems / kGroupCols);
        tiles[r](xt, ldx, wg + size_t(k0) * step_elems, ks, y + size_t(row0) * out_features + col0, out_features,
                 cols, k0 == 0);
        row0 += r;
      }
    }
  }
}

}  // namespace

void gemm_bf16_avx512(const uint16_t* x_bf16, const uint16_t* packed, float* y, int rows, int out_features,
                      int in_features) {
  static constexpr TileFn<uint16_t> tiles[kMaxTileRows + 1] = {
      nullptr, tile_bf16<1>, tile_bf16<2>, tile_bf16<3>, tile_bf16<4>, tile_bf16<5>, tile_bf16<6>};
  const int kp = gemm_k_padded_bf16(in_features);
  run_gemm<uint16_t>(x_bf16, kp, packed, y, rows, out_features, kp / 2, kChunkPairs, kGroupCols * 2,
                     int64_t(out_features) * in_features, tiles);
}

void gemm_f32_avx512(const float* x, const float* packed, float* y, int rows, int out_features, int in_features) {
  static constexpr TileFn<float> tiles[kMaxTileRows + 1] = {nullptr,     tile_f32<1>, tile_f32<2>, tile_f32<3>,
                                                            tile_f32<4>, tile_f32<5>, tile_f32<6>};
  run_gemm<float>(x, in_features, packed, y, rows, out_features, in_features, kChunkK, kGroupCols,
                  int64_t(out_features) * in_features, tiles);
}

TS_AVX512_BF16 void convert_f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)h);
  }
  if (i < n) {
    __mmask16 m = __mmask16((1u << (n - i)) - 1u);
    __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, (__m256i)h);
  }
}

}  // namespace ts::kernels::cpu
