// The amx variant's bf16 GEMM: Intel AMX tiles (tdpbf16ps) on the same packed layout (gemm_packed.h).
//
// Why: a tree batch of 8-16 rows is compute-bound on AVX-512 FMA (measured: k=8 costs 1.7-2x k=1 on a
// DRAM-bound model), while one tdpbf16ps does 16 x 16 x 32 multiply-adds; with tiles the weights' streaming is
// the whole cost for any batch up to 16 rows, which is what speculative decoding needs.
//
// Layout fit: for one 64-column group the packed weights are [k_pairs][64 cols][2] bf16, so 16 k pairs of one
// 16-column panel are a B tile as it is: 16 rows of 64 bytes, row stride 256 bytes. A is the activations as
// bf16 [rows, k_padded] (16 rows per tile, stride k_padded * 2 bytes); C is 16 x 16 f32, four C tiles per group.
// Tiles: tmm0-3 C (the group's 4 panels), tmm4/5 A/B of a full 16-pair step, tmm6/7 A/B of the tail step
// (k_pairs % 16, their own shape in the same configuration).
//
// Determinism: y[r, o] is one element of one C tile, accumulating the k steps in ascending order; what the
// hardware does inside a step depends only on that row's and column's operands. Rows never change the order
// (a partial row block is padded with zero rows), threads split the column groups: batch-invariant like the
// other variants, and differs from them in the last bits (bf16 products summed in tdpbf16ps's order,
// denormals flushed).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/parallel.h"

#define TS_AMX __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))

namespace ts::kernels::cpu::amx {
namespace {

constexpr int kTileRows = 16;        // rows of A and C per tile, k pairs per B tile
constexpr int kPanelCols = 16;       // columns per C tile
constexpr int kPanels = kGroupCols / kPanelCols;
constexpr int kWeightRowBytes = kGroupCols * 2 * 2;  // one k pair of a group: 64 cols x (even, odd) bf16
constexpr int64_t kParallelMinMacs = 1 << 20;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile i
  uint8_t rows[16] = {};
};

TileConfig make_config(int tail_pairs) {
  TileConfig c;
  for (int t = 0; t < kPanels; ++t) c.colsb[t] = kPanelCols * 4, c.rows[t] = kTileRows;  // C: 16 x 16 f32
  c.colsb[4] = kTileRows * 4, c.rows[4] = kTileRows;   // A: 16 rows x 16 pairs
  c.colsb[5] = kPanelCols * 4, c.rows[5] = kTileRows;  // B: 16 pairs x 16 cols
  if (tail_pairs > 0) {
    c.colsb[6] = uint16_t(tail_pairs * 4), c.rows[6] = kTileRows;
    c.colsb[7] = kPanelCols * 4, c.rows[7] = uint8_t(tail_pairs);
  }
  return c;
}

// C(0..3) += A . B for the 4 panels of one step; a, w point at the step's first pair.
#define TS_AMX_STEP(A, B, a, a_stride, w)                                                \
  do {                                                                                   \
    _tile_loadd(A, a, a_stride);                                                         \
    _tile_loadd(B, (w), kWeightRowBytes);                                                \
    _tile_dpbf16ps(0, A, B);                                                             \
    _tile_loadd(B, (w) + 1 * kPanelCols * 2, kWeightRowBytes);                           \
    _tile_dpbf16ps(1, A, B);                                                             \
    _tile_loadd(B, (w) + 2 * kPanelCols * 2, kWeightRowBytes);                           \
    _tile_dpbf16ps(2, A, B);                                                             \
    _tile_loadd(B, (w) + 3 * kPanelCols * 2, kWeightRowBytes);                           \
    _tile_dpbf16ps(3, A, B);                                                             \
  } while (0)

struct Problem {
  const uint16_t* x_bits;   // [rows, kp] bf16
  const uint16_t* a_last;   // [16, kp] bf16: the last row block, padded with zero rows
  const uint16_t* packed;   // packed weights (gemm_packed.h)
  float* y;                 // [rows, out_features]
  int rows, out_features, kp, full_steps, tail, row_blocks, last_rows;
  size_t group_elems;
  const TileConfig* config;
};

// Column groups [g0, g1) of y. Runs on the calling thread; tile state is per thread, so it configures its own.
TS_AMX void run_groups(const Problem& pb, int g0, int g1) {
  __asm__ volatile("" ::: "memory");  // the tile loads are asm reading memory through plain pointers
  _tile_loadconfig(pb.config);
  const long a_stride = long(pb.kp) * 2;  // bytes per activation row
  alignas(64) float c_buf[kTileRows * kGroupCols];  // [16 rows, 64 cols] of one group
  for (int g = g0; g < g1; ++g) {
    const int col0 = g * kGroupCols, cols = std::min(kGroupCols, pb.out_features - col0);
    const uint16_t* wg = pb.packed + size_t(g) * pb.group_elems;
    for (int rb = 0; rb < pb.row_blocks; ++rb) {
      const bool last = rb == pb.row_blocks - 1;
      const uint16_t* a = last ? pb.a_last : pb.x_bits + size_t(rb) * kTileRows * pb.kp;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int s = 0; s < pb.full_steps; ++s) {
        const uint16_t* w = wg + size_t(s) * kTileRows * kGroupCols * 2;
        TS_AMX_STEP(4, 5, a + s * kTileRows * 2, a_stride, w);
      }
      if (pb.tail > 0) {
        const uint16_t* w = wg + size_t(pb.full_steps) * kTileRows * kGroupCols * 2;
        TS_AMX_STEP(6, 7, a + pb.full_steps * kTileRows * 2, a_stride, w);
      }
      _tile_stored(0, c_buf + 0 * kPanelCols, kGroupCols * 4);
      _tile_stored(1, c_buf + 1 * kPanelCols, kGroupCols * 4);
      _tile_stored(2, c_buf + 2 * kPanelCols, kGroupCols * 4);
      _tile_stored(3, c_buf + 3 * kPanelCols, kGroupCols * 4);
      const int n_rows = last ? pb.last_rows : kTileRows;
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
  Problem pb;
  pb.x_bits = x_bits;
  pb.packed = packed;
  pb.y = y;
  pb.rows = rows;
  pb.out_features = out_features;
  pb.kp = gemm_k_padded_bf16(in_features);
  const int pairs = pb.kp / 2;
  pb.full_steps = pairs / kTileRows;
  pb.tail = pairs % kTileRows;
  pb.row_blocks = (rows + kTileRows - 1) / kTileRows;
  pb.last_rows = rows - (pb.row_blocks - 1) * kTileRows;
  pb.group_elems = size_t(pairs) * kGroupCols * 2;
  thread_local std::vector<uint16_t> a_last;  // [16, kp]
  a_last.assign(size_t(kTileRows) * pb.kp, 0);
  std::memcpy(a_last.data(), x_bits + size_t(pb.row_blocks - 1) * kTileRows * pb.kp,
              size_t(pb.last_rows) * pb.kp * 2);
  pb.a_last = a_last.data();
  const TileConfig config = make_config(pb.tail);
  pb.config = &config;
  const int64_t macs = int64_t(out_features) * in_features * rows;
  parallel_ranges(gemm_groups(out_features), macs >= kParallelMinMacs,
                  [&](int64_t g0, int64_t g1) { run_groups(pb, int(g0), int(g1)); });
}

#undef TS_AMX_STEP

}  // namespace ts::kernels::cpu::amx
