// The amx variant's bf16 GEMM: Intel AMX tiles (tdpbf16ps) on the same packed layout (gemm_packed.h).
//
// Why: a tree batch of 8-16 rows is compute-bound on AVX-512 FMA (k=8 costs well above k=1 even on a DRAM-bound model:
// docs/results/optimization-notes.md, "AMX GEMM: why tiles"), while one tdpbf16ps does 16 x 16 x 32 multiply-adds; with
// tiles the weights' streaming is the whole cost for any batch up to 16 rows, which is what speculative decoding needs.
//
// Layout fit: for one 64-column group the packed weights are [k_pairs][64 cols][2] bf16, so 16 k pairs of one
// 16-column panel are a B tile as it is: 16 rows of 64 bytes, row stride 256 bytes. A is the activations as
// bf16 [rows, k_padded] (16 rows per tile, stride k_padded * 2 bytes); C is 16 x 16 f32, four C tiles per group.
// Tiles: tmm0-3 C (the group's 4 panels), A in tmm4/tmm7 and B in tmm5/tmm6, alternating. K is walked in whole
// 16-pair steps: the activations are copied zero-padded to a multiple of 32, and a packed buffer carries zeroed
// slack after its last group (kPackedSlackBytes), so the last step's extra pairs multiply zeros (finite weights
// of the next group, or the slack).
//
// Determinism: y[r, o] is one element of one C tile, accumulating the k steps in ascending order; what the
// hardware does inside a step depends only on that row's and column's operands. Rows never change the order
// (a partial row block is a tile of fewer rows), threads split the column groups: batch-invariant like the
// other variants, and differs from them in the last bits (bf16 products summed in tdpbf16ps's order,
// denormals flushed).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/parallel.h"

#define TS_AMX __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))

namespace ts::kernels::cpu::amx {
namespace {

constexpr int kTileRows = 16;        // rows of A and C per tile, k pairs per B tile
constexpr int kPanelCols = 16;       // columns per C tile
constexpr int kPanels = kGroupCols / kPanelCols;
constexpr int kWeightRowBytes = kGroupCols * 2 * 2;  // one k pair of a group: 64 cols x (even, odd) bf16
constexpr int kStepPairs = kTileRows;                // k pairs per step

using TileConfig = AmxTileConfig;

// Every tile 64 bytes wide: C0-3 (tmm0-3, a_rows x 16 f32), A (tmm4 and tmm7, alternating between steps, a_rows
// x 32 bf16), B (tmm5 and tmm6, alternating between panels, 16 pairs x 16 columns), so a load never waits for the
// product still reading its tile. A row block of fewer than 16 rows configures A and C with its own row count
// rather than padding with zero rows: one decode row then loads 64 bytes of A per step instead of 1 KiB and multiplies
// one row, which is faster at one row even with the weights from DRAM, where the tile products are not the cost
// (docs/results/optimization-notes.md, "AMX GEMM: A and C tiles sized to the row block").
// A row's products never depend on the tile's other rows, so the bits do not change (batch-invariance tests).
TileConfig make_config(int a_rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = (t == 5 || t == 6) ? kTileRows : a_rows;
  return c;
}

// The weights kPrefetchSteps steps ahead (a step is 4 KiB: 64 lines), which tile loads do not ask for on their own.
// Prefetching one step ahead streams faster than two at 1-16 rows, and none at all is slower
// (docs/results/optimization-notes.md, "AMX GEMM: prefetch distance").
constexpr int kPrefetchSteps = 1;
TS_AMX inline void prefetch_ahead(const uint16_t* w) {
  const char* p = reinterpret_cast<const char*>(w) + kPrefetchSteps * kStepPairs * kWeightRowBytes;
  for (int line = 0; line < kStepPairs * kWeightRowBytes / 64; ++line) _mm_prefetch(p + 64 * line, _MM_HINT_T0);
}

// C(0..3) += A . B for the 4 panels of one step; a, w point at the step's first pair.
#define TS_AMX_STEP(A, a, a_stride, w)                                \
  do {                                                                \
    if (kPrefetchSteps > 0) prefetch_ahead(w);                        \
    _tile_loadd(A, a, a_stride);                                      \
    _tile_loadd(5, (w), kWeightRowBytes);                             \
    _tile_dpbf16ps(0, A, 5);                                          \
    _tile_loadd(6, (w) + 1 * kPanelCols * 2, kWeightRowBytes);        \
    _tile_dpbf16ps(1, A, 6);                                          \
    _tile_loadd(5, (w) + 2 * kPanelCols * 2, kWeightRowBytes);        \
    _tile_dpbf16ps(2, A, 5);                                          \
    _tile_loadd(6, (w) + 3 * kPanelCols * 2, kWeightRowBytes);        \
    _tile_dpbf16ps(3, A, 6);                                          \
  } while (0)

struct Problem {
  const uint16_t* a;        // [rows, steps * 32] bf16: the activations, zero-padded in k
  const uint16_t* packed;   // packed weights (gemm_packed.h), kPackedSlackBytes of zeros after the last group
  float* y;                 // [rows, out_features]
  int rows, out_features, a_cols, steps, row_blocks;
  size_t group_elems;
  const TileConfig* full_config;  // A and C of 16 rows
  const TileConfig* tail_config;  // A and C of rows % 16 rows (the last row block), when that is not 0
};

// Column groups [g0, g1) of y. Runs on the calling thread; tile state is per thread, so it configures its own.
// A step past the group's last pair reads the next group's (or the slack's) pairs against zero activations.
TS_AMX void run_groups(const Problem& pb, int g0, int g1) {
  __asm__ volatile("" ::: "memory");  // the tile loads are asm reading memory through plain pointers
  const int full_blocks = pb.rows / kTileRows;
  const TileConfig* loaded = nullptr;
  const long a_stride = long(pb.a_cols) * 2;  // bytes per activation row
  alignas(64) float c_buf[kTileRows * kGroupCols];  // [16 rows, 64 cols] of one group
  for (int g = g0; g < g1; ++g) {
    const int col0 = g * kGroupCols, cols = std::min(kGroupCols, pb.out_features - col0);
    const uint16_t* wg = pb.packed + size_t(g) * pb.group_elems;
    for (int rb = 0; rb < pb.row_blocks; ++rb) {
      const uint16_t* a = pb.a + size_t(rb) * kTileRows * pb.a_cols;
      const TileConfig* want = rb < full_blocks ? pb.full_config : pb.tail_config;
      if (want != loaded) _tile_loadconfig(want), loaded = want;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      int s = 0;
      for (; s + 2 <= pb.steps; s += 2) {
        TS_AMX_STEP(4, a + s * kStepPairs * 2, a_stride, wg + size_t(s) * kStepPairs * kGroupCols * 2);
        TS_AMX_STEP(7, a + (s + 1) * kStepPairs * 2, a_stride, wg + size_t(s + 1) * kStepPairs * kGroupCols * 2);
      }
      if (s < pb.steps) TS_AMX_STEP(4, a + s * kStepPairs * 2, a_stride, wg + size_t(s) * kStepPairs * kGroupCols * 2);
      _tile_stored(0, c_buf + 0 * kPanelCols, kGroupCols * 4);
      _tile_stored(1, c_buf + 1 * kPanelCols, kGroupCols * 4);
      _tile_stored(2, c_buf + 2 * kPanelCols, kGroupCols * 4);
      _tile_stored(3, c_buf + 3 * kPanelCols, kGroupCols * 4);
      const int n_rows = std::min(kTileRows, pb.rows - rb * kTileRows);
      for (int r = 0; r < n_rows; ++r)
        std::memcpy(pb.y + size_t(rb * kTileRows + r) * pb.out_features + col0, c_buf + r * kGroupCols,
                    size_t(cols) * 4);
    }
  }
  _tile_release();
}

}  // namespace

// x_bits: [rows, k_padded] bf16 bits (zero padding column), as convert_rows_to_bf16 writes them.
void gemm_bf16(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features,
               int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
  Problem pb;
  pb.packed = packed;
  pb.y = y;
  pb.rows = rows;
  pb.out_features = out_features;
  pb.steps = (kp / 2 + kStepPairs - 1) / kStepPairs;
  pb.a_cols = pb.steps * kStepPairs * 2;
  pb.row_blocks = (rows + kTileRows - 1) / kTileRows;
  pb.group_elems = size_t(kp / 2) * kGroupCols * 2;
  thread_local std::vector<uint16_t> a;  // [rows, a_cols]
  a.resize(size_t(rows) * pb.a_cols);
  for (int r = 0; r < rows; ++r) {  // each row copied, then only its k padding zeroed
    uint16_t* dst = a.data() + size_t(r) * pb.a_cols;
    std::memcpy(dst, x_bits + size_t(r) * kp, size_t(kp) * 2);
    std::memset(dst + kp, 0, size_t(pb.a_cols - kp) * 2);
  }
  pb.a = a.data();
  const TileConfig full_config = make_config(kTileRows), tail_config = make_config(std::max(1, rows % kTileRows));
  pb.full_config = &full_config;
  pb.tail_config = &tail_config;
  parallel_ranges(gemm_groups(out_features), gemm_worth_threads(rows, out_features, in_features, 2),
                  [&](int64_t g0, int64_t g1) { run_groups(pb, int(g0), int(g1)); });
}

#undef TS_AMX_STEP

}  // namespace ts::kernels::cpu::amx
