// Internal: the integer GEMM (qgemm.h) for the K-quants Q4_K and Q6_K (256-value super-blocks). The activations are
// the same QuantizedRows as for Q8_0 / Q4_0 (32-value blocks; Q6_K also reads sum16, the sums of 16-value halves),
// so one quantize_rows serves every weight type. qgemm() and qgemm_pack() in qgemm.cc forward K types here.
//
// Packed weights, per group of kQGroup = 16 output rows (rows past out_features are all zero, scales included),
// per super-block s in k order (lane = output row in the group; 16 GGUF blocks' bytes, so 4.5 / 6.5625 bpw):
//   Q4_K (2304 bytes = 16 x 144):
//     d:     16 f16                                                                             32 bytes
//     dmin:  16 f16                                                                             32 bytes
//     lo:    [8 j][16 lanes] uint8 = (sc_j & 15) | (m_j & 15) << 4   (6-bit scale / min of sub-block j)   128 bytes
//     hi:    [4 i][16 lanes] uint8 = sc_i >> 4 | (m_i >> 4) << 2 | (sc_i+4 >> 4) << 4 | (m_i+4 >> 4) << 6   64 bytes
//     quants: 8 sub-blocks j of 32 values, each as Q4_0's: [4 quads][16 lanes][4 bytes], byte t of quad i =
//            q[4i+t] | q[16+4i+t] << 4 (q = 0..15, the GGUF nibble)                             8 x 256 bytes
//   Q6_K (3360 bytes = 16 x 210):
//     d:      16 f16                                                                            32 bytes
//     scales: [16 j][16 lanes] int8 (the GGUF scale of 16-value sub-block j)                    256 bytes
//     per 32-value block i (8 of them, 384 bytes each), with q = the 6-bit GGUF level (0..63) and quad j holding
//     k = 4j..4j+3 of the block (byte t: k = 4j+t):
//       low:  [4 quads i][16 lanes][4 bytes], byte t = (q[4i+t] & 15) | (q[16+4i+t] & 15) << 4       256 bytes
//       high: [2 pairs p][16 lanes][4 bytes], byte t = the top 2 bits of q in quads 2p, 2p+4, 2p+1, 2p+5
//             at bits 0, 2, 4, 6                                                                128 bytes
//     so quad j's 6-bit weights are (low nibble) | ((high >> shift) & 0x30) with one shift per quad.
// The scales stay 6-bit / int8 in memory; a tile widens them once per super-block (Q4_K) or per block (Q6_K)
// and reuses them for all its rows.
//
// Arithmetic (the scalar reference, qgemm_groups_k_scalar; every variant computes exactly these f32 operations in
// this order, and the integer sums exactly), per output o, row r, 32-value activation block b in k order
// (b = 8s + j: sub-block j of super-block s; dx = acts.d[r, b], dsum = acts.dsum[r, b] = fl(dx * sum of the
// block's q)):
//   Q4_K: isum = sum_k q[k] * xq[k] (q = 0..15, at most 32 * 15 * 127: exact)
//         ds = d_o * float(sc_oj), dm = dmin_o * float(m_oj)   (both exact: 11-bit f16 mantissa x 6 bits)
//         acc = fma(ds * dx, float(isum), acc)
//         acc = fma(-dm, dsum, acc)
//   Q6_K: lo = sum_{k<16} q[k] xq[k] - 32 * sum16[r, 2b], hi = the same over k >= 16 with sum16[r, 2b + 1]
//         (|lo|, |hi| <= 16 * 32 * 127: exact in int32 and in float)
//         dsc_lo = d_o * float(sc_o,2j), dsc_hi = d_o * float(sc_o,2j+1)   (exact: 11 x 8 bits)
//         t = fma(dsc_lo, float(lo), dsc_hi * float(hi))
//         acc = fma(t, dx, acc)
// Why this form: on the CPUs seen, f32 multiplies and FMAs issue on the same two pipes as vpdpbusd, so each one
// per (row, block) costs the slot of one of the block's 8 integer dot products. Q4_K's min term reads the
// per-row dsum (1 op, not a multiply by dx and an FMA); Q6_K scales its two halves in f32 (3 ops, not two 32-bit
// integer multiplies, a multiply and an FMA). The scale vectors (ds, dm, dsc_lo, dsc_hi) are shared by a tile's rows.
// acc starts at +0 and is stored as y[r, o]. Rows never interact, so the bits do not depend on the batch, the
// tile or the thread count (tests/kernels/qgemm_k_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/qgemm.h"
#include "kernels/quant.h"

namespace ts::kernels::cpu {

constexpr int kQSuper = 256;          // values per K-quant super-block
constexpr int kQBlocksPerSuper = 8;   // 32-value activation blocks per super-block
constexpr size_t kQ4KGroupSuperBytes = 16 * 144;
constexpr size_t kQ6KGroupSuperBytes = 16 * 210;

inline bool qgemm_is_k(QuantType t) { return t == QuantType::Q4_K || t == QuantType::Q6_K; }
inline size_t qgemm_k_group_super_bytes(QuantType t) {
  return t == QuantType::Q4_K ? kQ4KGroupSuperBytes : kQ6KGroupSuperBytes;
}

// blocks: [out_features rows][in / 256] GGUF blocks of type t -> packed: qgemm_packed_bytes(t, ...).
void qgemm_k_pack(QuantType t, const void* blocks, int out_features, int in_features, uint8_t* packed);
// y: [rows, out_features] = acts . W^T on `k`'s variant, threads splitting the groups.
void qgemm_k(QgemmKernel k, QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
             int out_features, int in_features);

// The per-variant entry points, reached through the kernel tables (kernel_table.h); group_begin, group_end: the
// 16-row groups to compute; *_vnni use vpdpbusd, *_plain its exact emulation.
void qgemm_groups_k_scalar(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
                           int out_features, int in_features, int group_begin, int group_end);
namespace avx2k_plain {
void run_groups_k(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end);
}  // namespace avx2k_plain
namespace avx2k_vnni {
void run_groups_k(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end);
}  // namespace avx2k_vnni
namespace avx512k_plain {
void run_groups_k(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end);
// Only rows [row_begin, row_end) (amx_int8's rows that do not fill its tiles).
void run_rows_k(QuantType t, const QuantizedRows& acts, int row_begin, int row_end, const uint8_t* packed, float* y,
                int out_features, int in_features, int group_begin, int group_end);
}  // namespace avx512k_plain
namespace avx512k_vnni {
void run_groups_k(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end);
// Only rows [row_begin, row_end) (amx_int8's rows that do not fill its tiles).
void run_rows_k(QuantType t, const QuantizedRows& acts, int row_begin, int row_end, const uint8_t* packed, float* y,
                int out_features, int in_features, int group_begin, int group_end);
}  // namespace avx512k_vnni
namespace amx_int8 {  // qgemm_amx.cc: Q4_K on AMX tiles; Q6_K and fewer than 4 rows run avx512k_vnni's
void run_groups_k(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end);
}  // namespace amx_int8

}  // namespace ts::kernels::cpu
