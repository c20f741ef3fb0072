// Packed column-group GEMM (layout in gemm_packed.h), written once against the vector layer and compiled per ISA
// by gemm_avx2.cc and gemm_avx512.cc: f32 FMA for both weight types.
//
// Why not vdpbf16ps for bf16 here: where vdpbf16ps retires fewer multiply-adds than zmm FMAs, widening bf16 -> f32 in
// registers (one shift or one and per vector of weights) and using FMA has the higher arithmetic rate, which is what
// decides the cost of a tree batch of 8-16 rows (docs/results/optimization-notes.md, "Default variant: widen-and-FMA
// or vdpbf16ps"). The vdpbf16ps kernel is the separate avx512bf16 variant (gemm_avx512bf16.cc).
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
// other passes find them in L2. With one pass per chunk (one row: one tile of all panels) that pass prefetches its own
// stream kPrefetchSteps k steps (4 KiB) ahead. With several, every pass prefetches an equal slice of the NEXT chunk, so
// DRAM keeps streaming while the later passes compute; prefetching only in the first pass made memory and arithmetic
// take turns, and no software prefetch at all was slower still. The next chunk's slices go to L2 only (prefetcht1):
// into L1 they evicted the lines the passes were reading and held L1 fill buffers for DRAM misses. Two chunks ahead
// instead of one was no better (docs/results/optimization-notes.md, "GEMM: every pass prefetches a slice of the next
// chunk" and "GEMM: next-chunk prefetch into L2").
constexpr int kPrefetchSteps = 16;

// Valid columns of panel p, given `cols` valid columns from the tile's first panel.
inline int panel_cols(int cols, int p) { return std::clamp(cols - p * kW, 0, kW); }

// What one pass prefetches: `lines` cache lines per k step starting at base + step * stride, into L1 (its own
// stream) or L2 only (the next chunk's slice). (Passed to the tiles as scalars and looped over inside them: GCC 12
// dropped every prefetch when the same loop sat in a helper taking a struct.)
struct PrefetchPlan {
  const char* base;
  int stride, lines;
  bool to_l2;
};

// y[R rows, P panels] (+)= x[R rows, pairs] . w; x points at the chunk's first k of row 0 and holds activations
// already rounded to bf16 (as f32). Each weight vector holds (k even, k odd) bf16 pairs of kW columns: shifting
// left by 16 gives the k-even weights as f32, masking the low half gives the k-odd ones. The products of two bf16
// values are exact in f32 (as in vdpbf16ps); each k then costs one FMA rounding.
// kPanelsOuter (for 1 row on 16-register AVX2): widen one panel at a time instead of all P first; same
// arithmetic, fewer live registers.
template <int R, int P, bool kPanelsOuter>
TS_SIMD void tile_bf16(const float* x, int ldx, const uint16_t* w, int pairs, float* y, int ldy, int cols,
                       bool first, const char* pf_base, int pf_stride, int pf_lines, bool pf_to_l2) {
  V acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = first ? zero() : load_n(y + r * ldy + p * kW, panel_cols(cols, p));
  for (int kp = 0; kp < pairs; ++kp) {
    const uint16_t* wk = w + size_t(kp) * kGroupCols * 2;  // [kPanels][kW lanes][2]; this tile reads P of them
    for (int line = 0; line < pf_lines; ++line) {
      const char* ahead = pf_base + size_t(kp) * pf_stride + 64 * line;
      pf_to_l2 ? prefetch_l2(ahead) : prefetch(ahead);
    }
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
      // The k-even weights of all P panels into every row, then the k-odd ones into the same registers: P live
      // weight vectors instead of 2P (AVX2, 3 rows: a 3 x 3 tile fits 16 registers where 3 x 2 was the most).
      V wv[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) wv[p] = bf16_low_half(load_int(wk + p * kW * 2));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V xe = set1(x[size_t(r) * ldx + 2 * kp]);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) acc[r][p] = fma(xe, wv[p], acc[r][p]);
      }
      constexpr bool kAllRegisters = R * P + P + 1 >= 15;  // accumulators + weights + broadcast: no room for the mask
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const VI pair = load_int(wk + p * kW * 2);
        wv[p] = kAllRegisters ? bf16_high_half_mask_in_memory(pair) : bf16_high_half(pair);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V xo = set1(x[size_t(r) * ldx + 2 * kp + 1]);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) acc[r][p] = fma(xo, wv[p], acc[r][p]);
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
                      const char* pf_base, int pf_stride, int pf_lines, bool /*pf_to_l2: not measured for f32*/) {
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
using TileFn = void (*)(const float*, int, const W*, int, float*, int, int, bool, const char*, int, int, bool);

// A family of tiles. shape[r] handles r rows (1 <= r <= max_rows): `fn` covers `panels` panels per pass, and
// `rest` the last pass of a group where `panels` does not divide kPanels (3 x 3 panels, then 3 x 2).
template <typename W>
struct Tiles {
  struct Shape {
    int panels;
    TileFn<W> fn, rest;
  };
  int max_rows;
  Shape shape[9];
  // Tree-verify sizes (up to 16 rows) whose even split would leave every tile short of max_rows for a remainder
  // of 1-3 rows take max_rows-row tiles first (tile_rows).
  bool full_tiles_first = false;
};

// How the K chunks of a run are walked: `steps` k steps per chunk, and the passes of a chunk prefetch the chunk
// `prefetch_chunks` ahead.
struct ChunkPlan {
  int steps, prefetch_chunks;
};

// Rows of the next tile: `rows` are split into ceil(rows / max_rows) tiles as evenly as possible (AVX-512: 12 rows
// -> 6 + 6, not 8 + 4), so the number of live accumulators stays high for every tile; except that with
// full_tiles_first, 7-9 and 13-15 rows take whole tiles first (8 -> 6 + 2, not 4 + 4). Only affects speed, never
// a row's arithmetic.
template <typename W>
inline int tile_rows(const Tiles<W>& tiles, int rows, int rows_left, int tiles_left) {
  const int rest = rows % tiles.max_rows;
  if (tiles.full_tiles_first && rows <= 16 && rest >= 1 && rest <= 3) return std::min(rows_left, tiles.max_rows);
  return (rows_left + tiles_left - 1) / tiles_left;
}

// Runs the whole GEMM: threads split column groups; each group walks K chunks, and within a chunk all row tiles
// and panel subsets.
template <typename W>
void run_gemm(const float* x, int ldx, const W* packed, float* y, int rows, int out_features, int k_steps,
              ChunkPlan chunk, int step_elems, int in_features, const Tiles<W>& tiles) {
  const int x_per_step = step_elems / kGroupCols;  // x elements per k step: 2 (bf16 pairs) or 1 (f32)
  const int groups = gemm_groups(out_features);
  const int n_tiles = (rows + tiles.max_rows - 1) / tiles.max_rows;
  const size_t group_elems = size_t(k_steps) * step_elems;
  const int step_bytes = step_elems * int(sizeof(W));  // one k step of a group: 256 bytes
  const int chunk_bytes = chunk.steps * step_bytes;
  const bool threaded = gemm_worth_threads(rows, out_features, in_features, int(sizeof(W)));
  parallel_ranges(groups, threaded, [&](int64_t g0, int64_t g1) {
    for (int g = int(g0); g < int(g1); ++g) {
      const int col0 = g * kGroupCols;
      const int cols = std::min(kGroupCols, out_features - col0);
      const int live_panels = std::min(kPanels, (cols + kW - 1) / kW);
      const W* wg = packed + size_t(g) * group_elems;
      int passes = 0;
      for (int t = 0, row0 = 0; t < n_tiles; ++t) {
        const int r = tile_rows(tiles, rows, rows - row0, n_tiles - t);
        passes += (live_panels + tiles.shape[r].panels - 1) / tiles.shape[r].panels;
        row0 += r;
      }
      for (int k0 = 0; k0 < k_steps; k0 += chunk.steps) {
        const int ks = std::min(chunk.steps, k_steps - k0);
        // Groups are stored back to back, so the chunks ahead start where this one ends (the next group's first
        // chunks after a group's last; past the thread's or the buffer's end the hints are harmless).
        const char* ahead = reinterpret_cast<const char*>(wg + size_t(k0 + ks) * step_elems) +
                            size_t(chunk.prefetch_chunks - 1) * chunk_bytes;
        const int slice = (chunk_bytes + passes - 1) / passes;  // bytes of that chunk each pass prefetches
        const int slice_stride = (slice + ks - 1) / ks;
        int row0 = 0, pass = 0;
        for (int t = 0; t < n_tiles; ++t) {
          const int r = tile_rows(tiles, rows, rows - row0, n_tiles - t);
          const typename Tiles<W>::Shape& shape = tiles.shape[r];
          const float* xt = x + size_t(row0) * ldx + size_t(k0) * x_per_step;
          for (int p0 = 0; p0 < live_panels; p0 += shape.panels, ++pass) {
            const W* wt = wg + size_t(k0) * step_elems + p0 * kW * x_per_step;
            const PrefetchPlan pf =
                passes == 1 ? PrefetchPlan{reinterpret_cast<const char*>(wt + kPrefetchSteps * step_elems), step_bytes,
                                           step_bytes / 64, false}
                            : PrefetchPlan{ahead + size_t(pass) * slice, slice_stride, (slice_stride + 63) / 64, true};
            const TileFn<W> fn = p0 + shape.panels > kPanels ? shape.rest : shape.fn;
            fn(xt, ldx, wt, ks, y + size_t(row0) * out_features + col0 + p0 * kW, out_features, cols - p0 * kW,
               k0 == 0, pf.base, pf.stride, pf.lines, pf.to_l2);
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
#define TS_ROWS_INNER(R, P) {P, tile_bf16<R, P, false>, nullptr}
constexpr Tiles<uint16_t> kBf16Wide = {5, {{}, TS_ROWS_INNER(1, 4), TS_ROWS_INNER(2, 4), TS_ROWS_INNER(3, 4),
                                           TS_ROWS_INNER(4, 4), TS_ROWS_INNER(5, 4)}};
constexpr Tiles<uint16_t> kBf16Tall = {8, {{}, TS_ROWS_INNER(1, 2), TS_ROWS_INNER(2, 2), TS_ROWS_INNER(3, 2),
                                           TS_ROWS_INNER(4, 2), TS_ROWS_INNER(5, 2), TS_ROWS_INNER(6, 2),
                                           TS_ROWS_INNER(7, 2), TS_ROWS_INNER(8, 2)}};
#undef TS_ROWS_INNER
// 6 rows x 4 panels (24 accumulators + 4 weights + 1 broadcast).
#define TS_F32(R) {4, tile_f32<R, 4>, nullptr}
constexpr Tiles<float> kF32 = {6, {{}, TS_F32(1), TS_F32(2), TS_F32(3), TS_F32(4), TS_F32(5), TS_F32(6)}};
#undef TS_F32
constexpr ChunkPlan kBf16Chunks = {kChunkPairs, 1};
#elif TS_SIMD_WIDTH == 8
// Each bf16 accumulator takes two dependent FMAs per k pair (8 cycles of latency), so a pass needs >= 8
// accumulators to keep both FMA ports busy, and 16 registers hold accumulators + live weights + broadcasts:
//   1 row: 1 x 8 panels, panels widened one at a time (8 + 2 + 2);  2 rows: 2 x 4 the same way (8 + 2 + 4);
//   3 rows: 3 x 3 (9 + 3 + 1 + the mask), the group's last pass 3 x 2;  4-5 rows: 4-5 x 2 (up to 10 + 2 + 1 + 1);
//   6 rows: 6 x 2 (12 + 2 + 1, the mask read from memory).
// Tiles measured alone (weights in L2): one row is bound by the chain latency (and by memory anyway), 3 x 3 beats
// 3 x 2, 5 x 2 is faster with its weight halves widened in turn than with both live, and 6 x 2 is the fastest
// (docs/results/optimization-notes.md, "GEMM (avx2): bf16 register tiles").
constexpr Tiles<uint16_t> kBf16 = {6,
                                   {{},
                                    {8, tile_bf16<1, 8, true>, nullptr},
                                    {4, tile_bf16<2, 4, true>, nullptr},
                                    {3, tile_bf16<3, 3, false>, tile_bf16<3, 2, false>},
                                    {2, tile_bf16<4, 2, false>, nullptr},
                                    {2, tile_bf16<5, 2, false>, nullptr},
                                    {2, tile_bf16<6, 2, false>, nullptr}},
                                   true};
// Whole 6-row tiles first for 7-9 and 13-15 rows (tile_rows): 8 rows as 6 + 2 keep three quarters of the rows in the
// fastest tile (6 x 2) where 4 + 4 ran all of them at 4 x 2's slower rate. At 10 and 16 rows (remainder 4) whole tiles
// first was no faster, nor the same rule with 8-row tiles on AVX-512 (docs/results/optimization-notes.md,
// "GEMM (avx2): whole 6-row tiles first").
// A call of 2-5 rows streams its weights from DRAM in the cases that matter (a tree verify), and there 3 rows run
// faster as 3 x 2 (4 passes per chunk) than as 3 x 3 (3 passes, whose prefetch slices are not whole lines per k step).
// With the weights in L3, 3 x 3 is faster, so it stays for the 3-row tiles of bigger calls (7 = 4 + 3 rows, ...)
// (docs/results/optimization-notes.md, "GEMM (avx2): 3 x 2 tiles for 3-row calls").
constexpr Tiles<uint16_t> kBf16FewRows = {5,
                                          {{},
                                           kBf16.shape[1],
                                           kBf16.shape[2],
                                           {2, tile_bf16<3, 2, false>, nullptr},
                                           kBf16.shape[4],
                                           kBf16.shape[5]}};
// f32: 1 row x 8 panels (weights as FMA memory operands), 2 rows x 4 panels (8 + 4 + 1), or up to 6 rows x 2
// panels (12 + 2 + 1).
constexpr Tiles<float> kF32 = {6,
                               {{},
                                {8, tile_f32<1, 8>, nullptr},
                                {4, tile_f32<2, 4>, nullptr},
                                {2, tile_f32<3, 2>, nullptr},
                                {2, tile_f32<4, 2>, nullptr},
                                {2, tile_f32<5, 2>, nullptr},
                                {2, tile_f32<6, 2>, nullptr}}};
// With 2-5 rows a 64 KiB chunk takes 2-4 passes whose compute is about as long as its DRAM read, and the two overlapped
// poorly (the later passes' L2 reads seem to queue behind the prefetches' DRAM misses): 8 KiB chunks, which stay in L1
// between passes, prefetched two chunks ahead, bring 2-5 rows closer to one row's time. At 6 rows and more compute
// dominates: 8 or 16 KiB chunks made no difference there, so 64 KiB chunks stayed then (fewer passes per byte); since
// the next-chunk slices go to L2, 16 KiB chunks two ahead won (kBf16ManyRowChunks, below).
// (docs/results/optimization-notes.md, "GEMM (avx2): 8 KiB chunks for 2-5 rows".)
constexpr ChunkPlan kBf16Chunks = {kChunkPairs, 1};
constexpr ChunkPlan kBf16FewRowChunks = {32, 2};
#else
#error "gemm-inl.h: unsupported TS_SIMD_WIDTH"
#endif
// 6-16 rows (a tree verify: several passes per chunk on either width): 16 KiB chunks, prefetched two chunks ahead into
// L2, run faster than 64 KiB chunks one ahead on both widths; 8 KiB chunks (avx2) were no better than 64. Used for
// every row count they made a 128-token prefill slower in one run (not told apart from the host's drift), so longer
// batches keep 64 KiB chunks (docs/results/optimization-notes.md, "GEMM: 16 KiB chunks two ahead for 6-16 rows").
// Chunking never changes a row's arithmetic (partial sums go through y exactly).
constexpr ChunkPlan kBf16ManyRowChunks = {64, 2};
inline bool many_row_chunks(int rows) { return rows >= 6 && rows <= 16; }

}  // namespace

void gemm_bf16(const float* x_rounded, const uint16_t* packed, float* y, int rows, int out_features,
               int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
#if TS_SIMD_WIDTH == 16
  const Tiles<uint16_t>& tiles = rows <= 5 ? kBf16Wide : kBf16Tall;
  const ChunkPlan chunks = many_row_chunks(rows) ? kBf16ManyRowChunks : kBf16Chunks;  // 1-5 rows: one pass
#else
  // With >= 3 rows every tile of the even split has >= 3 rows (max 6 per tile).
  const bool few_rows = rows >= 2 && rows <= 5;
  const Tiles<uint16_t>& tiles = few_rows ? kBf16FewRows : kBf16;
  const ChunkPlan chunks = few_rows               ? kBf16FewRowChunks
                           : many_row_chunks(rows) ? kBf16ManyRowChunks
                                                   : kBf16Chunks;
#endif
  run_gemm<uint16_t>(x_rounded, kp, packed, y, rows, out_features, kp / 2, chunks, kGroupCols * 2, in_features,
                     tiles);
}

void gemm_f32(const float* x, const float* packed, float* y, int rows, int out_features, int in_features) {
  run_gemm<float>(x, in_features, packed, y, rows, out_features, in_features, ChunkPlan{kChunkK, 1}, kGroupCols,
                  in_features, kF32);
}

}  // namespace ts::kernels::cpu::TS_SIMD_NS
