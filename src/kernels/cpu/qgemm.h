// Internal: y = x W^T for Q8_0 / Q4_0 weights with integer dot products on activations quantized per row in
// 32-value blocks (llama.cpp's way), packed once into 16-output groups that every ISA reads.
//
// Activations (QuantizedRows): per row and 32-value block b, d = amax / 127 (f32), q = round-half-even(x / d as
// x * (1 / d)), so |q| <= 127, sum = sum of the block's q and sum16 = the sums of its two 16-value halves (for
// Q6_K's 16-value sub-blocks), dsum = d * float(sum) (for Q4_K's mins). A row's blocks depend on that row alone.
// Q4_K and Q6_K weights: qgemm_k.h.
//
// Packed weights, per group of kQGroup = 16 output rows (rows past out_features are zero). Per block b:
//   scales: 16 f16 (the GGUF block scales, lane = output row in the group)                       32 bytes
//   Q8_0 quants: [8 quads][16 lanes][4 bytes] = w + 128 as uint8, quad j holding k = 4j..4j+3    512 bytes
//   Q4_0 quants: [4 quads][16 lanes][4 bytes], byte t of quad j = q[4j+t] | q[16+4j+t] << 4,     256 bytes
//                the unsigned nibbles q = w + 8 as stored in GGUF
// Q8_0 stores each block's scales and quants together, block after block in k order (544 bytes a block).
// Q4_0 stores runs of kQRunBlocks = 8 blocks in k order: run s (blocks 8s .. 8s + m - 1, m = min(8, blocks - 8s))
// holds its blocks' scales [m][16 lanes] f16 (32 m bytes), then their quants [m][256 bytes]: 288 m bytes, as
// block by block. Why runs: the avx512 tile converts a run's scales together when the run starts and reads them
// back per block, and so streams a one-row product from DRAM ~20% faster than converting each block's scales where
// the block starts (docs/results/optimization-notes.md, "Q4_0 in runs of 8 blocks"); a run's scales fill whole lines.
// qgemm_scales_offset / qgemm_quants_offset place block b in its group for both formats.
// One zmm (or two ymm) of quants feeds vpdpbusd (uint8 weights x int8 activations, 4 products per int32 lane)
// with the activation quad broadcast to all lanes; the weight offset is removed exactly afterwards:
// sum_k w*x = sum_k (w + o)*x - o * sum_k x.
//
// Determinism: the integer sum of a block is exact whatever computes it, and y[r, o] = one f32 accumulator
// updated once per block in k order: acc = fma(d_w * d_x, float(isum), acc). Every variant (scalar, avx2 with or
// without AVX-VNNI, avx512 with or without AVX512-VNNI, amx-int8) therefore gives the same bits for every row, batch
// shape and thread count (tests/kernels/qgemm_test.cc checks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/quant.h"

namespace ts::kernels::cpu {

constexpr int kQGroup = 16;  // output rows per packed group
constexpr int kQBlock = 32;  // values per block (Q8_0, Q4_0 and the activations)

constexpr int kQRunBlocks = 8;  // Q4_0 blocks per run (scales first)

inline int qgemm_groups(int out_features) { return (out_features + kQGroup - 1) / kQGroup; }
// Bytes of one group's block b: scales + quants.
constexpr size_t qgemm_group_block_bytes(QuantType t) { return 32 + (t == QuantType::Q8_0 ? 512 : 256); }
// Where block b's 16 f16 scales and its quants start in a group of nb blocks (the layout above).
constexpr size_t qgemm_scales_offset(QuantType t, [[maybe_unused]] int nb, int b) {
  if (t == QuantType::Q8_0) return size_t(b) * qgemm_group_block_bytes(t);
  const int first = b - b % kQRunBlocks;  // the run's first block
  return size_t(first) * qgemm_group_block_bytes(t) + 32 * size_t(b - first);
}
constexpr size_t qgemm_quants_offset(QuantType t, int nb, int b) {
  if (t == QuantType::Q8_0) return size_t(b) * qgemm_group_block_bytes(t) + 32;
  const int first = b - b % kQRunBlocks;
  const int run_blocks = nb - first < kQRunBlocks ? nb - first : kQRunBlocks;
  return size_t(first) * qgemm_group_block_bytes(t) + 32 * size_t(run_blocks) + 256 * size_t(b - first);
}
inline size_t qgemm_packed_bytes(QuantType t, int out_features, int in_features) {
  if (t == QuantType::Q4_K || t == QuantType::Q6_K)  // 16 GGUF blocks per group and super-block (qgemm_k.h)
    return size_t(qgemm_groups(out_features)) * size_t(in_features / kQK_K) * kQGroup * block_bytes(t);
  return size_t(qgemm_groups(out_features)) * size_t(in_features / kQBlock) * qgemm_group_block_bytes(t);
}
// Whether the integer GEMM takes this format: all four (in_features a multiple of block_values(t)).
inline bool qgemm_supports(QuantType t) {
  return t == QuantType::Q8_0 || t == QuantType::Q4_0 || t == QuantType::Q4_K || t == QuantType::Q6_K;
}

// f(std::integral_constant<int, R>{}) with R = rows, 1 <= rows <= kMax: how the variants' group loops give a tile
// its row count as a constant.
template <int kMax, class F>
inline void with_tile_rows(int rows, F&& f) {
  if constexpr (kMax > 1) {
    if (rows < kMax) return with_tile_rows<kMax - 1>(rows, f);
  }
  f(std::integral_constant<int, kMax>{});
}

// blocks: [out_features rows][in / 32 blocks] of GGUF blocks of type t -> packed: qgemm_packed_bytes.
void qgemm_pack(QuantType t, const void* blocks, int out_features, int in_features, uint8_t* packed);

// Activations of `rows` rows of `in` values (in a multiple of 32), quantized as described above.
struct QuantizedRows {
  int rows = 0, blocks = 0;    // blocks per row = in / 32
  std::vector<int8_t> q;       // [rows, blocks * 32]
  std::vector<float> d;        // [rows, blocks]
  std::vector<int32_t> sum;    // [rows, blocks]
  std::vector<int32_t> sum16;  // [rows, blocks * 2]: the sums of values 0..15 and 16..31 of each block
  std::vector<float> dsum;     // [rows, blocks]: d * float(sum), rounded once (Q4_K's min term)
  // The weight offsets' corrections, ready to start a block's integer sum (quantize_rows fills them from sum and
  // sum16 for every variant): a tile broadcasts one from memory instead of scaling and subtracting per row.
  std::vector<int32_t> sum_neg8;     // [rows, blocks]: -8 * sum (Q4_0's nibble offset)
  std::vector<int32_t> sum_neg128;   // [rows, blocks]: -128 * sum (Q8_0's offset with vpdpbusd)
  std::vector<int32_t> sum16_neg32;  // [rows, blocks * 2]: -32 * sum16 (Q6_K's level offset)
  // Sizes every field for `rows` rows of `in_features` values (a multiple of 32); what each quantizer fills.
  void shape(int rows_, int in_features) {
    rows = rows_;
    blocks = in_features / kQBlock;
    const size_t n = size_t(rows) * blocks;
    q.resize(n * kQBlock);
    d.resize(n);
    sum.resize(n);
    sum16.resize(n * 2);
    dsum.resize(n);
    sum_neg8.resize(n);
    sum_neg128.resize(n);
    sum16_neg32.resize(n * 2);
  }
};

// The kernel variants. Each needs its ISA's CPU features (plus VNNI for the *_vnni ones, and AMX-INT8 with the OS's
// tile permission for Amx).
enum class QgemmKernel { Scalar, Avx2, Avx2Vnni, Avx512, Avx512Vnni, Amx };
const char* qgemm_kernel_name(QgemmKernel k);
bool qgemm_kernel_supported(QgemmKernel k);
std::vector<QgemmKernel> qgemm_supported_kernels();
// What active_isa() runs: amx -> Amx where the CPU has AMX-INT8, avx512* -> Avx512Vnni or Avx512, avx2 ->
// Avx2Vnni or Avx2, scalar -> Scalar.
QgemmKernel qgemm_active_kernel();

// x: [rows, in] -> acts. Same bits from every kernel variant.
void quantize_rows(QgemmKernel k, const float* x, int rows, int in_features, QuantizedRows* acts);
// Blocks [block_begin, block_end) of acts (shaped already; block i is x[32 i, 32 i + 32), the blocks of all rows in
// sequence), every field quantize_rows fills, on the calling thread: the same bits, for callers that quantize the
// blocks they produced on their own threads.
void quantize_block_range(QgemmKernel k, const float* x, int64_t block_begin, int64_t block_end,
                          QuantizedRows* acts);
// y: [rows, out_features] = acts . W^T for packed weights of type t.
void qgemm(QgemmKernel k, QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
           int out_features, int in_features);

// Only the 16-output groups [group_begin, group_end) of qgemm's y (the other columns untouched), on the calling
// thread.
void qgemm_group_range(QgemmKernel k, QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
                       int out_features, int in_features, int group_begin, int group_end);
// One part of a stacked product (qgemm_stacked): packed weights of type t for out_features outputs.
struct QgemmPart {
  QuantType type = QuantType::Q8_0;
  const uint8_t* packed = nullptr;
  int out_features = 0;
};
// y: [rows, sum of the parts' out_features] = [part 0's outputs | part 1's | ...], each part's bits its own qgemm's.
// One parallel region splits all the parts' groups (a mixed Q4_K / Q6_K q/k/v product would otherwise run a region
// per part, its small parts on one thread); part_y: [rows, out_features of each part] scratch, one per part.
void qgemm_stacked(QgemmKernel k, const std::vector<QgemmPart>& parts, const QuantizedRows& acts, float* y,
                   int in_features, std::vector<std::vector<float>>& part_y);

// The per-variant entry points (qgemm.cc, qgemm_avx2.cc, qgemm_avx512.cc), reached through the kernel tables
// (kernel_table.h). `group_begin, group_end`: the 16-row groups to compute (threads split groups); *_vnni use
// vpdpbusd, *_plain its exact emulation.
void qgemm_groups_scalar(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                         int in_features, int group_begin, int group_end);
// Blocks [block_begin, block_end) of acts (shaped already; block i is x[32 i, 32 i + 32), the blocks of all rows in
// sequence): q, d, sum, sum16 and dsum. Threads split the blocks (quantize_rows).
void quantize_blocks_scalar(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts);
namespace avx2_plain {
void run_groups(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end);
}  // namespace avx2_plain
namespace avx2_vnni {
void run_groups(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end);
}  // namespace avx2_vnni
namespace avx512_plain {
void run_groups(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end);
// Only rows [row_begin, row_end) (amx_int8's rows that do not fill its tiles).
void run_rows(QuantType t, const QuantizedRows& acts, int row_begin, int row_end, const uint8_t* packed, float* y,
              int out_features, int in_features, int group_begin, int group_end);
}  // namespace avx512_plain
namespace avx512_vnni {
void run_groups(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end);
// Only rows [row_begin, row_end) (amx_int8's rows that do not fill its tiles).
void run_rows(QuantType t, const QuantizedRows& acts, int row_begin, int row_end, const uint8_t* packed, float* y,
              int out_features, int in_features, int group_begin, int group_end);
}  // namespace avx512_vnni
namespace amx_int8 {  // qgemm_amx.cc: AMX tile products; fewer than 4 rows run avx512_vnni's tiles
void run_groups(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end);
}  // namespace amx_int8
namespace avx2 {
void quantize_blocks(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts);
}  // namespace avx2
namespace avx512 {
void quantize_blocks(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts);
}  // namespace avx512

}  // namespace ts::kernels::cpu
