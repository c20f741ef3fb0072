// The avx512bf16 variant's bf16 GEMM: vdpbf16ps on the same packed layout (gemm_packed.h), whose (k even, k odd)
// pairs per column are exactly the operand vdpbf16ps takes. Hand-written: no portable vector layer has it.
//
// Arithmetic per output (Intel SDM): acc += x[k+1] w[k+1], then acc += x[k] w[k], each product exact, each add
// rounded to nearest even, denormal inputs and results flushed to zero. So it differs from the FMA kernels in
// the order within a pair and in the flushing, and is deterministic and batch-invariant the same way: y[r, o] is
// one lane of one accumulator walking k pairs in ascending order, whatever rows or threads.
//
// Register tile: up to 6 rows x 4 panels of 16 columns (24 accumulators + 4 weight vectors + 1 broadcast).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_avx512.h"

#define TS_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")))

namespace ts::kernels::cpu::avx512bf16 {
namespace {

constexpr int kW = 16;
constexpr int kPanels = kGroupCols / kW;
constexpr int kMaxTileRows = 6;
constexpr int kChunkPairs = 256;
constexpr int kPrefetchSteps = 16;

inline __mmask16 panel_mask(int cols, int p) { return avx512::tail(std::clamp(cols - p * kW, 0, kW)); }

// y[R rows, group] (+)= x[R rows, pairs] . w; x: bf16 pairs as uint32 (low half = k even), row stride ldx pairs.
template <int R>
TS_BF16 void tile(const uint32_t* x, int ldx, const uint16_t* w, int pairs, float* y, int ldy, int cols, bool first) {
  __m512 acc[R][kPanels];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < kPanels; ++p)
      acc[r][p] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(panel_mask(cols, p), y + r * ldy + p * kW);
  for (int kp = 0; kp < pairs; ++kp) {
    const uint16_t* wk = w + size_t(kp) * kGroupCols * 2;  // [4 panels][16 lanes][2]
#pragma GCC unroll 4
    for (int line = 0; line < 4; ++line) avx512::prefetch(wk + kPrefetchSteps * kGroupCols * 2 + line * 32);
    __m512bh wv[kPanels];
#pragma GCC unroll 4
    for (int p = 0; p < kPanels; ++p) wv[p] = (__m512bh)_mm512_load_si512(wk + p * kW * 2);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh xr = (__m512bh)_mm512_set1_epi32(int32_t(x[size_t(r) * ldx + kp]));
#pragma GCC unroll 4
      for (int p = 0; p < kPanels; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], xr, wv[p]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < kPanels; ++p) _mm512_mask_storeu_ps(y + r * ldy + p * kW, panel_mask(cols, p), acc[r][p]);
}

using TileFn = void (*)(const uint32_t*, int, const uint16_t*, int, float*, int, int, bool);
constexpr TileFn kTiles[kMaxTileRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

}  // namespace

// x: [rows, in] f32 -> x_bits: [rows, k_padded] bf16 bits, rounded as f32_to_bf16, zero in the padding column.
TS_BF16 void convert_rows_to_bf16(const float* x, int rows, int in_features, uint16_t* x_bits) {
  const int kp = gemm_k_padded_bf16(in_features);
  for (int r = 0; r < rows; ++r) {
    const float* src = x + size_t(r) * in_features;
    uint16_t* dst = x_bits + size_t(r) * kp;
    for (int i = 0; i < in_features; i += kW) {
      const int64_t left = in_features - i;
      avx512::store_bf16_bits_n(dst + i, avx512::round_bf16(avx512::load_n(src + i, left)), left);
    }
    if (kp != in_features) dst[in_features] = 0;
  }
}

void gemm_bf16(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features, int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
  const int pairs = kp / 2;
  const uint32_t* x = reinterpret_cast<const uint32_t*>(x_bits);  // [rows, pairs]; x_bits is 4-byte aligned
  const int groups = gemm_groups(out_features);
  const int n_tiles = (rows + kMaxTileRows - 1) / kMaxTileRows;
  const size_t group_elems = size_t(pairs) * kGroupCols * 2;
  parallel_ranges(groups, gemm_worth_threads(rows, out_features, in_features, 2), [&](int64_t g0, int64_t g1) {
    for (int g = int(g0); g < int(g1); ++g) {
      const int col0 = g * kGroupCols;
      const int cols = std::min(kGroupCols, out_features - col0);
      const uint16_t* wg = packed + size_t(g) * group_elems;
      for (int k0 = 0; k0 < pairs; k0 += kChunkPairs) {
        const int ks = std::min(kChunkPairs, pairs - k0);
        int row0 = 0;
        for (int t = 0; t < n_tiles; ++t) {
          const int r = (rows - row0 + n_tiles - t - 1) / (n_tiles - t);
          kTiles[r](x + size_t(row0) * pairs + k0, pairs, wg + size_t(k0) * kGroupCols * 2, ks,
                    y + size_t(row0) * out_features + col0, out_features, cols, k0 == 0);
          row0 += r;
        }
      }
    }
  });
}

}  // namespace ts::kernels::cpu::avx512bf16
