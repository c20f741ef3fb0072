// Internal: y = x W^T on weights packed once into column groups, with a fixed reduction order per output.
//
// Why our own GEMM rather than a library's (oneDNN was dropped: no bf16 without AVX-512, no promise of batch
// invariance): greedy speculative decoding compares a tree batch with single-token forwards, so a row's output
// must not depend on how many rows share the call. Here every output
// element y[r, o] is one accumulator lane that walks k = 0, 1, 2, ... in order whatever `rows` is (rows only
// change how many accumulators run side by side), and threads split the output columns, never k.
//
// Packed layout (both dtypes, every ISA): output columns in groups of kGroupCols = 64. For group g:
//   bf16: [k_pairs][64 cols][2]  (per k pair, (k even, k odd) per column: 4 zmm or 8 ymm of 16 / 8 columns)
//   f32:  [k][64 cols]
// The layout does not depend on the ISA, so switching variants (set_isa) needs no repacking.
// Groups are stored one after another; columns >= out_features and k >= in_features are zero.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ts::kernels::cpu {

constexpr int kGroupCols = 64;  // output columns per group

inline int gemm_groups(int out_features) { return (out_features + kGroupCols - 1) / kGroupCols; }
inline int gemm_k_padded_bf16(int in_features) { return (in_features + 1) & ~1; }  // k pairs for vdpbf16ps

// Bytes of zeros a bf16 packed buffer carries after its last group (not part of the weights): the amx GEMM
// reads every k step as a whole 16-pair B tile, so the last step of the last group may read up to 15 pairs past
// the group (16 x 64 cols x 2 x 2 bytes). Its activations there are zero, so what it reads adds nothing.
constexpr size_t kPackedSlackBytes = 16 * 64 * 2 * 2;

// Whether a GEMM call is worth handing to the thread pool (a hand-off costs microseconds): at least 1M multiply-adds
// (tens of microseconds of arithmetic on one core), or at least 256 KiB of weights. One row streams its weights, and
// they come from L3 or DRAM, where a second core adds bandwidth: with the multiply-add rule alone the shipped 130 MB
// target's fused q/k/v, o and down projections (0.26-0.79 M multiply-adds per row) ran on the calling thread at one
// row, and the worker idled for much of a decode step (docs/results/optimization-notes.md, "GEMM: when a call goes to
// the thread pool").
constexpr int64_t kParallelMinMacs = int64_t(1) << 20;
constexpr int64_t kParallelMinWeightBytes = int64_t(256) << 10;
inline bool gemm_worth_threads(int rows, int out_features, int in_features, int bytes_per_weight) {
  const int64_t weights = int64_t(out_features) * in_features;
  return weights * rows >= kParallelMinMacs || weights * bytes_per_weight >= kParallelMinWeightBytes;
}

// Elements (not bytes) of the packed buffer.
inline size_t packed_elems_bf16(int out_features, int in_features) {
  return size_t(gemm_groups(out_features)) * size_t(gemm_k_padded_bf16(in_features)) * kGroupCols;
}
inline size_t packed_elems_f32(int out_features, int in_features) {
  return size_t(gemm_groups(out_features)) * size_t(in_features) * kGroupCols;
}

// w_bf16: [out, in] bf16 bits -> packed: packed_elems_bf16(out, in) bf16 bits.
void pack_bf16(const uint16_t* w_bf16, int out_features, int in_features, uint16_t* packed);
// w_f32: [out, in] -> packed: packed_elems_f32(out, in).
void pack_f32(const float* w_f32, int out_features, int in_features, float* packed);

// The kernels (per ISA: simd_kernels.h) take x_rounded: [rows, k_padded] f32 activations already rounded to
// bf16 values (KernelTable::round_to_bf16), zero in the padding column, and write y: [rows, out_features].

// Portable versions with the same per-element order (k ascending, one accumulator), for the scalar variant.
// Consistent with themselves across batch shapes (the property that matters); not bit-equal to the SIMD
// kernels, whose FMA rounds once per k where a plain multiply-add may round twice.
void gemm_bf16_scalar(const float* x_rounded, const uint16_t* packed, float* y, int rows, int out_features,
                      int in_features);
void gemm_f32_scalar(const float* x, const float* packed, float* y, int rows, int out_features, int in_features);

}  // namespace ts::kernels::cpu
