// Packing for the column-group GEMM (layout in gemm_packed.h) and the portable (scalar variant) kernels.
#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/parallel.h"

namespace ts::kernels::cpu {

// Packing runs once at load; threads help only for big layers (a tiny model's load then starts no pool worker,
// which would otherwise spin for a while after the last run). Each range zeroes its own groups first, so the first
// touch of a fresh buffer's pages (the kernel clearing them) is split across the threads too.
constexpr int64_t kParallelPackElems = int64_t(1) << 22;

void pack_bf16(const uint16_t* w_bf16, int out_features, int in_features, uint16_t* packed) {
  const int kp = gemm_k_padded_bf16(in_features);
  const int groups = gemm_groups(out_features);
  parallel_ranges(groups, int64_t(out_features) * in_features >= kParallelPackElems, [&](int64_t g0, int64_t g1) {
    std::memset(packed + size_t(g0) * kp * kGroupCols, 0, size_t(g1 - g0) * kp * kGroupCols * sizeof(uint16_t));
    for (int g = int(g0); g < int(g1); ++g) {
      uint16_t* dst_group = packed + size_t(g) * kp * kGroupCols;  // [k_pairs][64 cols][2]
      for (int c = 0; c < kGroupCols; ++c) {
        const int o = g * kGroupCols + c;
        if (o >= out_features) break;
        const uint16_t* src_row = w_bf16 + size_t(o) * in_features;
        for (int k = 0; k < in_features; ++k) dst_group[size_t(k / 2) * kGroupCols * 2 + c * 2 + (k & 1)] = src_row[k];
      }
    }
  });
}

void pack_f32(const float* w_f32, int out_features, int in_features, float* packed) {
  const int groups = gemm_groups(out_features);
  parallel_ranges(groups, int64_t(out_features) * in_features >= kParallelPackElems, [&](int64_t g0, int64_t g1) {
    const size_t group_elems = size_t(in_features) * kGroupCols;
    std::memset(packed + size_t(g0) * group_elems, 0, size_t(g1 - g0) * group_elems * sizeof(float));
    for (int g = int(g0); g < int(g1); ++g) {
      float* dst_group = packed + size_t(g) * in_features * kGroupCols;  // [k][64 cols]
      for (int c = 0; c < kGroupCols; ++c) {
        const int o = g * kGroupCols + c;
        if (o >= out_features) break;
        const float* src_row = w_f32 + size_t(o) * in_features;
        for (int k = 0; k < in_features; ++k) dst_group[size_t(k) * kGroupCols + c] = src_row[k];
      }
    }
  });
}

// One accumulator per output, k ascending; threads split columns only (see gemm_packed.h).
void gemm_bf16_scalar(const float* x_rounded, const uint16_t* packed, float* y, int rows, int out_features,
                      int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
  const bool worth_it = gemm_worth_threads(rows, out_features, in_features, 2);
  parallel_ranges(out_features, worth_it, [&](int64_t o0, int64_t o1) {
    for (int o = int(o0); o < int(o1); ++o) {
      const uint16_t* wg = packed + size_t(o / kGroupCols) * kp * kGroupCols;
      const int c = o % kGroupCols;
      for (int r = 0; r < rows; ++r) {
        const float* xr = x_rounded + size_t(r) * kp;
        float acc = 0.0f;
        for (int k = 0; k < in_features; ++k)
          acc += xr[k] * bf16_to_f32(wg[size_t(k / 2) * kGroupCols * 2 + c * 2 + (k & 1)]);
        y[size_t(r) * out_features + o] = acc;
      }
    }
  });
}

void gemm_f32_scalar(const float* x, const float* packed, float* y, int rows, int out_features, int in_features) {
  const bool worth_it = gemm_worth_threads(rows, out_features, in_features, 4);
  parallel_ranges(out_features, worth_it, [&](int64_t o0, int64_t o1) {
    for (int o = int(o0); o < int(o1); ++o) {
      const float* wg = packed + size_t(o / kGroupCols) * in_features * kGroupCols;
      const int c = o % kGroupCols;
      for (int r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * in_features;
        float acc = 0.0f;
        for (int k = 0; k < in_features; ++k) acc += xr[k] * wg[size_t(k) * kGroupCols + c];
        y[size_t(r) * out_features + o] = acc;
      }
    }
  });
}

}  // namespace ts::kernels::cpu
