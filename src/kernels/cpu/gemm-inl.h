// Packed column-group GEMM (layout in gemm_packed.h), written once against the vector layer and compiled per ISA
// by gemm_avx2.cc and gemm_avx512.cc: f32 FMA for both weight types.
//
// Why not vdpbf16ps for bf16 here: on this project's Xeons it retired ~1.3 G/s per core against ~5.4 G/s for a
// zmm FMA (measured, independent chains), so widening bf16 -> f32 in registers (one shift or one and per vector
// of weights) and using FMA has twice the arithmetic rate, which is what decides the cost of a tree batch of
// 8-16 rows. The vdpbf16ps kernel is the separate avx512bf16 variant (gemm_avx512bf16.cc).
//
// Register tile: R rows x P panels of kW columns. Per k step the tile loads its weight vectors once and reuses
// them for every row, so a batch of 8 rows streams the weights once (the cost of a tree batch is then mostly the
// extra dot products, not extra DRAM traffic).
//
// Determinism: y[r, o] lives in one lane of one accumulator, updated in ascending k with one FMA per k (bf16:
// acc = fma(x_odd, w_odd, fma(x_even, w_even, acc))). K is walked in chunks so the weights of a chunk stay in L2
// while all row tiles use them; between chunks the partial sums are stored to y and reloaded, which is exact.
// Nothing about this order depends on `rows`, the row tiling, the thread count, or even the vector width: the
// AVX2 and AVX-512 instantiations give the same bits (tests/kernels/linear_test.cc checks it).
#include <algorithm>

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/parallel.h"

namespace ts::kernels::cpu::TS_SIMD_NS {
namespace {

constexpr int kPanels = kGroupCols / kW;  // panels of kW columns per 64-column group (AVX2: 8, AVX-512: 4)
constexpr int kChunkPairs = 256;  // k pairs per chunk (bf16: 64 cols x 512 k x 2 B = 64 KiB of weights)
constexpr int kChunkK = 256;      // k per chunk (f32: 64 cols x 256 k x 4 B = 64 KiB)
// Software prefetch. A chunk's first pass (row tile x panel subset) is the one that touches its weights first; the
// other passes find them in L2. With one pass per chunk (one row: one tile of all panels) that pass prefetches its
// own stream kPrefetchSteps k steps (4 KiB) ahead. With several, every pass prefetches an equal slice of the
// NEXT chunk, so DRAM keeps streaming while the later passes compute; prefetching only in the first pass made
// memory and arithmetic take turns. bench_linear, bf16 3072x1024 from DRAM, 1 thread, Zen 4, avx2 (8 rows = 8
// passes): 8 rows 700-730 -> 550-560 us, 16 rows 1200-1220 -> 1020-1100 us; avx512 (2-4 passes) unchanged.
constexpr int kPrefetchSteps = 16;
// Parallelise only when the work is big enough to amortise the thread hand-off (~5 us): 1M multiply-adds is
// 10-50 us on one core.
constexpr int64_t kParallelMinMacs = 1 << 20;  // rows x out x in

// Valid columns of panel p, given `cols` valid columns from the tile's first panel.
inline int panel_cols(int cols, int p) { return std::clamp(cols - p * kW, 0, kW); }

// What one pass prefetches: `lines` cache lines per k step starting at base + step * stride. (Passed to the tiles
// as three scalars and looped over inside them: GCC 12 dropped every prefetch when the same loop sat in a helper
// taking a struct.)
struct PrefetchPlan {
  const char* base;
  int stride, lines;
};

// y[R rows, P panels] (+)= x[R rows, pairs] . w; x points at the chunk's first k of row 0 and holds activations
// already rounded to bf16 (as f32). Each weight vector holds (k even, k odd) bf16 pairs of kW columns: shifting
// left by 16 gives the k-even weights as f32, masking the low half gives the k-odd ones. The products of two bf16
// values are exact in f32 (as in vdpbf16ps); each k then costs one FMA rounding.
// kPanelsOuter (for 1 row on 16-register AVX2): widen one panel at a time instead of all P first; same
// arithmetic, fewer live registers.
template <int R, int P, bool kPanelsOuter>
TS_SIMD void tile_bf16(const float* x, int ldx, const uint16_t* w, int pairs, float* y, int ldy, int cols,
                       bool first, const char* pf_base, int pf_stride, int pf_lines) {
  V acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = first ? zero() : load_n(y + r * ldy + p * kW, panel_cols(cols, p));
  for (int kp = 0; kp < pairs; ++kp) {
    const uint16_t* wk = w + size_t(kp) * kGroupCols * 2;  // [kPanels][kW lanes][2]; this tile reads P of them
    for (int line = 0; line < pf_lines; ++line) prefetch(pf_base + size_t(kp) * pf_stride + 64 * line);
    if constexpr (kPanelsOuter) {
      V xe[R], xo[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) xe[r] = set1(x[size_t(r) * ldx + 2 * kp]), xo[r] = set1(x[size_t(r) * ldx + 2 * kp + 1]);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const VI pair = load_int(wk + p * kW * 2);
        const V even = bf16_low_half(pair), odd = bf16_high_half(pair);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][p] = fma(xo[r], odd, fma(xe[r], even, acc[r][p]));
      }
    } else {
      V even[P], odd[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const VI pair = load_int(wk + p * kW * 2);
        even[p] = bf16_low_half(pair);
        odd[p] = bf16_high_half(pair);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V xe = set1(x[size_t(r) * ldx + 2 * kp]);
        const V xo = set1(x[size_t(r) * ldx + 2 * kp + 1]);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) acc[r][p] = fma(xo, odd[p], fma(xe, even[p], acc[r][p]));
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) store_n(y + r * ldy + p * kW, acc[r][p], panel_cols(cols, p));
}

template <int R, int P>
TS_SIMD void tile_f32(const float* x, int ldx, const float* w, int ks, float* y, int ldy, int cols, bool first,
                      const char* pf_base, int pf_stride, int pf_lines) {
  V acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = first ? zero() : load_n(y + r * ldy + p * kW, panel_cols(cols, p));
  for (int k = 0; k < ks; ++k) {
    const float* wk = w + size_t(k) * kGroupCols;  // [kPanels][kW lanes]
    for (int line = 0; line < pf_lines; ++line) prefetch(pf_base + size_t(k) * pf_stride + 64 * line);
    V wv[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) wv[p] = loadu(wk + p * kW);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V xr = set1(x[size_t(r) * ldx + k]);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[r][p] = fma(xr, wv[p], acc[r][p]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) store_n(y + r * ldy + p * kW, acc[r][p], panel_cols(cols, p));
}

template <typename W>
using TileFn = void (*)(const float*, int, const W*, int, float*, int, int, bool, const char*, int, int);

// A family of tiles: fns[r] handles r rows (1 <= r <= max_rows) x `panels` panels.
template <typename W>
struct Tiles {
  int max_rows;
  int panels;
  TileFn<W> fns[9];
};

// Split `rows` into tiles of at most max_rows, as even as possible (8 rows -> 4 + 4, not 6 + 2), so the number of
// live accumulators stays high for every tile. Only affects speed, never a row's arithmetic.
inline int tile_rows(int rows_left, int tiles_left) { return (rows_left + tiles_left - 1) / tiles_left; }

// Runs the whole GEMM: threads split column groups; each group walks K chunks, and within a chunk all row tiles
// and panel subsets.
template <typename W>
void run_gemm(const float* x, int ldx, const W* packed, float* y, int rows, int out_features, int k_steps,
              int chunk_steps, int step_elems, int64_t weight_elems, const Tiles<W>& tiles) {
  const int x_per_step = step_elems / kGroupCols;  // x elements per k step: 2 (bf16 pairs) or 1 (f32)
  const int groups = gemm_groups(out_features);
  const int n_tiles = (rows + tiles.max_rows - 1) / tiles.max_rows;
  const size_t group_elems = size_t(k_steps) * step_elems;
  const int step_bytes = step_elems * int(sizeof(W));  // one k step of a group: 256 bytes
  const int chunk_bytes = chunk_steps * step_bytes;
  parallel_ranges(groups, weight_elems * rows >= kParallelMinMacs, [&](int64_t g0, int64_t g1) {
    for (int g = int(g0); g < int(g1); ++g) {
      const int col0 = g * kGroupCols;
      const int cols = std::min(kGroupCols, out_features - col0);
      const W* wg = packed + size_t(g) * group_elems;
      const int passes = n_tiles * ((std::min(kPanels, (cols + kW - 1) / kW) + tiles.panels - 1) / tiles.panels);
      for (int k0 = 0; k0 < k_steps; k0 += chunk_steps) {
        const int ks = std::min(chunk_steps, k_steps - k0);
        // Groups are stored back to back, so the next chunk starts where this one ends (the next group's first
        // chunk after a group's last; past the thread's or the buffer's end the hints are harmless).
        const char* next_chunk = reinterpret_cast<const char*>(wg + size_t(k0 + ks) * step_elems);
        const int slice = (chunk_bytes + passes - 1) / passes;  // bytes of the next chunk each pass prefetches
        const int slice_stride = (slice + ks - 1) / ks;
        int row0 = 0, pass = 0;
        for (int t = 0; t < n_tiles; ++t) {
          const int r = tile_rows(rows - row0, n_tiles - t);
          const float* xt = x + size_t(row0) * ldx + size_t(k0) * x_per_step;
          for (int p0 = 0; p0 < kPanels && p0 * kW < cols; p0 += tiles.panels, ++pass) {
            const W* wt = wg + size_t(k0) * step_elems + p0 * kW * x_per_step;
            const PrefetchPlan pf =
                passes == 1 ? PrefetchPlan{reinterpret_cast<const char*>(wt + kPrefetchSteps * step_elems), step_bytes,
                                           step_bytes / 64}
                            : PrefetchPlan{next_chunk + size_t(pass) * slice, slice_stride, (slice_stride + 63) / 64};
            tiles.fns[r](xt, ldx, wt, ks, y + size_t(row0) * out_features + col0 + p0 * kW, out_features,
                         cols - p0 * kW, k0 == 0, pf.base, pf.stride, pf.lines);
          }
          row0 += r;
        }
      }
    }
  });
}

// Tile families per vector width. AVX-512 (32 registers): up to 5 rows x 4 panels (20 accumulators + 8 widened
// weights + 2 broadcasts), or for 6+ rows up to 8 rows x 2 panels (16 + 4 + 2), which widens each weight vector
// once per 8 rows instead of per 5 (the shift/and ops compete with FMAs for the same ports; 8 rows = a typical
// tree batch). AVX2 (16 registers): below.
#if TS_SIMD_WIDTH == 16
constexpr Tiles<uint16_t> kBf16Wide = {5, 4, {nullptr, tile_bf16<1, 4, false>, tile_bf16<2, 4, false>,
                                              tile_bf16<3, 4, false>, tile_bf16<4, 4, false>, tile_bf16<5, 4, false>}};
constexpr Tiles<uint16_t> kBf16Tall = {8, 2, {nullptr, tile_bf16<1, 2, false>, tile_bf16<2, 2, false>,
                                              tile_bf16<3, 2, false>, tile_bf16<4, 2, false>, tile_bf16<5, 2, false>,
                                              tile_bf16<6, 2, false>, tile_bf16<7, 2, false>, tile_bf16<8, 2, false>}};
// 6 rows x 4 panels (24 accumulators + 4 weights + 1 broadcast).
constexpr Tiles<float> kF32 = {6, 4, {nullptr, tile_f32<1, 4>, tile_f32<2, 4>, tile_f32<3, 4>, tile_f32<4, 4>,
                                      tile_f32<5, 4>, tile_f32<6, 4>}};
#elif TS_SIMD_WIDTH == 8
// Each bf16 accumulator takes two dependent FMAs per k pair (8 cycles of latency), so a pass needs >= 8
// accumulators to keep both FMA ports busy: 1 row x 8 panels, 2 rows x 4 panels (panels widened one at a time:
// 8 + 4 + 3 registers), then 3-5 rows x 2 panels (more passes over the L2-resident chunk, but 6-10 chains).
constexpr Tiles<uint16_t> kBf16OneRow = {1, 8, {nullptr, tile_bf16<1, 8, true>}};
constexpr Tiles<uint16_t> kBf16TwoRows = {2, 4, {nullptr, tile_bf16<1, 4, true>, tile_bf16<2, 4, true>}};
constexpr Tiles<uint16_t> kBf16Narrow = {5, 2, {nullptr, tile_bf16<1, 2, false>, tile_bf16<2, 2, false>,
                                                tile_bf16<3, 2, false>, tile_bf16<4, 2, false>, tile_bf16<5, 2, false>}};
// f32: 1 row x 8 panels (weights as FMA memory operands), 2 rows x 4 panels (8 + 4 + 1), or up to 6 rows x 2
// panels (12 + 2 + 1).
constexpr Tiles<float> kF32OneRow = {1, 8, {nullptr, tile_f32<1, 8>}};
constexpr Tiles<float> kF32TwoRows = {2, 4, {nullptr, tile_f32<1, 4>, tile_f32<2, 4>}};
constexpr Tiles<float> kF32Narrow = {6, 2, {nullptr, tile_f32<1, 2>, tile_f32<2, 2>, tile_f32<3, 2>, tile_f32<4, 2>,
                                            tile_f32<5, 2>, tile_f32<6, 2>}};
#else
#error "gemm-inl.h: unsupported TS_SIMD_WIDTH"
#endif

}  // namespace

void gemm_bf16(const float* x_rounded, const uint16_t* packed, float* y, int rows, int out_features,
               int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
  const int64_t weights = int64_t(out_features) * in_features;
#if TS_SIMD_WIDTH == 16
  const Tiles<uint16_t>& tiles = rows <= 5 ? kBf16Wide : kBf16Tall;
#else
  // With >= 3 rows every tile of the even split has >= 3 rows (max 5 per tile).
  const Tiles<uint16_t>& tiles = rows == 1 ? kBf16OneRow : rows == 2 ? kBf16TwoRows : kBf16Narrow;
#endif
  run_gemm<uint16_t>(x_rounded, kp, packed, y, rows, out_features, kp / 2, kChunkPairs, kGroupCols * 2, weights, tiles);
}

void gemm_f32(const float* x, const float* packed, float* y, int rows, int out_features, int in_features) {
  const int64_t weights = int64_t(out_features) * in_features;
#if TS_SIMD_WIDTH == 16
  const Tiles<float>& tiles = kF32;
#else
  const Tiles<float>& tiles = rows == 1 ? kF32OneRow : rows == 2 ? kF32TwoRows : kF32Narrow;
#endif
  run_gemm<float>(x, in_features, packed, y, rows, out_features, in_features, kChunkK, kGroupCols, weights, tiles);
}

}  // namespace ts::kernels::cpu::TS_SIMD_NS
