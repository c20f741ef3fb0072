// The quantized GEMM's packing, its scalar reference (the definition every SIMD variant must equal bit for bit),
// and its split over threads (each variant's kernels: kernel_table.h). Layout and arithmetic: qgemm.h.
#include "kernels/cpu/qgemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/qgemm_k.h"

namespace ts::kernels::cpu {

namespace {

constexpr int64_t kParallelQPackValues = int64_t(1) << 22;  // as pack_bf16: a tiny model's load starts no worker
constexpr int64_t kParallelQuantizeValues = int64_t(1) << 14;  // quantize_rows

uint16_t block_scale(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);  // d is the first field of both block types
  return d;
}

}  // namespace

void qgemm_pack(QuantType t, const void* blocks, int out_features, int in_features, uint8_t* packed) {
  TS_CHECK(qgemm_supports(t), "qgemm_pack: ", quant_type_name(t), " is not an integer-GEMM format");
  if (qgemm_is_k(t)) return qgemm_k_pack(t, blocks, out_features, in_features, packed);
  TS_CHECK(in_features % kQBlock == 0, "qgemm_pack: in_features ", in_features, " is not a multiple of 32");
  const int nb = in_features / kQBlock;
  const size_t bb = block_bytes(t), gb = qgemm_group_block_bytes(t);
  const uint8_t* src = static_cast<const uint8_t*>(blocks);  // [out][nb] blocks
  // Groups are independent: packed on the kernels' threads for big layers (load time of a multi-GB file), each range
  // zeroing its own bytes first.
  parallel_ranges(qgemm_groups(out_features), int64_t(out_features) * in_features >= kParallelQPackValues,
                  [&](int64_t g0, int64_t g1) {
    std::memset(packed + size_t(g0) * nb * gb, 0, size_t(g1 - g0) * nb * gb);
    for (int g = int(g0); g < int(g1); ++g) {
      uint8_t* group = packed + size_t(g) * nb * gb;
      for (int b = 0; b < nb; ++b) {
        uint16_t* scales = reinterpret_cast<uint16_t*>(group + qgemm_scales_offset(t, nb, b));  // [16]
        uint8_t* quants = group + qgemm_quants_offset(t, nb, b);
        for (int lane = 0; lane < kQGroup; ++lane) {
          const int row = g * kQGroup + lane;
          if (row >= out_features) {  // padding rows: scale 0; quants must still be the zero *value*
            if (t == QuantType::Q8_0) {
              for (int j = 0; j < 8; ++j) std::memset(quants + (j * kQGroup + lane) * 4, 128, 4);
            } else {
              for (int j = 0; j < 4; ++j) std::memset(quants + (j * kQGroup + lane) * 4, 0x88, 4);
            }
            continue;
          }
          const uint8_t* block = src + (size_t(row) * nb + b) * bb;
          scales[lane] = block_scale(block);
          // Four values at a time (the layout's unit): Q8_0 stores w + 128, i.e. the int8 with its sign bit flipped;
          // Q4_0's bytes (low nibble: value k, high: value k + 16, each w + 8) are the GGUF block's own bytes.
          if (t == QuantType::Q8_0) {
            const int8_t* qs = reinterpret_cast<const BlockQ8_0*>(block)->qs;
            for (int j = 0; j < 8; ++j) {
              uint32_t four;
              std::memcpy(&four, qs + 4 * j, 4);
              four ^= 0x80808080u;
              std::memcpy(quants + (j * kQGroup + lane) * 4, &four, 4);
            }
          } else {
            const uint8_t* qs = reinterpret_cast<const BlockQ4_0*>(block)->qs;
            for (int j = 0; j < 4; ++j) std::memcpy(quants + (j * kQGroup + lane) * 4, qs + 4 * j, 4);
          }
        }
      }
    }
  });
}

void quantize_blocks_scalar(const float* x, int64_t block_begin, int64_t block_end, QuantizedRows* acts) {
  for (int64_t i = block_begin; i < block_end; ++i) {
    const float* xb = x + i * kQBlock;
    int8_t* qb = acts->q.data() + i * kQBlock;
    float amax = 0.0f;
    for (int k = 0; k < kQBlock; ++k) amax = std::max(amax, std::fabs(xb[k]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int half[2] = {0, 0};
    for (int k = 0; k < kQBlock; ++k) {
      qb[k] = int8_t(std::nearbyint(xb[k] * id));  // round half to even, as cvtps2dq
      half[k / 16] += qb[k];
    }
    acts->d[size_t(i)] = d;
    acts->sum[size_t(i)] = half[0] + half[1];
    acts->dsum[size_t(i)] = d * float(half[0] + half[1]);
    acts->sum16[size_t(i) * 2] = half[0];
    acts->sum16[size_t(i) * 2 + 1] = half[1];
  }
}

void qgemm_groups_scalar(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features,
                         int in_features, int group_begin, int group_end) {
  const int nb = in_features / kQBlock;
  const size_t gb = qgemm_group_block_bytes(t);
  for (int g = group_begin; g < group_end; ++g) {
    for (int r = 0; r < acts.rows; ++r) {
      float acc[kQGroup] = {};
      for (int b = 0; b < nb; ++b) {
        const uint8_t* group = packed + size_t(g) * nb * gb;
        const uint16_t* scales = reinterpret_cast<const uint16_t*>(group + qgemm_scales_offset(t, nb, b));
        const uint8_t* quants = group + qgemm_quants_offset(t, nb, b);
        const int8_t* xq = acts.q.data() + size_t(r) * in_features + b * kQBlock;
        const float dx = acts.d[size_t(r) * nb + b];
        for (int lane = 0; lane < kQGroup; ++lane) {
          int32_t isum = 0;
          for (int k = 0; k < kQBlock; ++k) {
            int w;
            if (t == QuantType::Q8_0) {
              w = int(quants[((k / 4) * kQGroup + lane) * 4 + k % 4]) - 128;
            } else {
              const int kk = k % 16;
              const uint8_t byte = quants[((kk / 4) * kQGroup + lane) * 4 + kk % 4];
              w = int(k < 16 ? byte & 0x0F : byte >> 4) - 8;
            }
            isum += w * xq[k];
          }
          acc[lane] = std::fma(f16_to_f32(scales[lane]) * dx, float(isum), acc[lane]);
        }
      }
      for (int lane = 0; lane < kQGroup; ++lane) {
        const int o = g * kQGroup + lane;
        if (o < out_features) y[size_t(r) * out_features + o] = acc[lane];
      }
    }
  }
}

const char* qgemm_kernel_name(QgemmKernel k) { return qgemm_table(k).name; }

bool qgemm_kernel_supported(QgemmKernel k) { return qgemm_table(k).supported; }

std::vector<QgemmKernel> qgemm_supported_kernels() {
  std::vector<QgemmKernel> out;
  for (QgemmKernel k : {QgemmKernel::Scalar, QgemmKernel::Avx2, QgemmKernel::Avx2Vnni, QgemmKernel::Avx512,
                        QgemmKernel::Avx512Vnni, QgemmKernel::Amx}) {
    if (qgemm_kernel_supported(k)) out.push_back(k);
  }
  return out;
}

QgemmKernel qgemm_active_kernel() { return active_kernels().qgemm->kernel; }

void quantize_block_range(QgemmKernel k, const float* x, int64_t block_begin, int64_t block_end,
                          QuantizedRows* acts) {
  qgemm_table(k).quantize_blocks(x, block_begin, block_end, acts);
  for (int64_t i = block_begin; i < block_end; ++i) {
    acts->sum_neg8[size_t(i)] = -8 * acts->sum[size_t(i)];
    acts->sum_neg128[size_t(i)] = -128 * acts->sum[size_t(i)];
    acts->sum16_neg32[size_t(2 * i)] = -32 * acts->sum16[size_t(2 * i)];
    acts->sum16_neg32[size_t(2 * i + 1)] = -32 * acts->sum16[size_t(2 * i + 1)];
  }
}

void quantize_rows(QgemmKernel k, const float* x, int rows, int in_features, QuantizedRows* acts) {
  TS_CHECK(in_features % kQBlock == 0, "quantize_rows: in_features ", in_features, " is not a multiple of 32");
  acts->shape(rows, in_features);
  const int64_t blocks = int64_t(rows) * (in_features / kQBlock);
  // Blocks are independent, so threads split them (in runs of 16, a vector quantizer's tile) with the same bits.
  // Parallel from 16k values: below that the split did not pay for its hand-off (docs/results/optimization-notes.md,
  // "Activation quantizing: threads split the blocks").
  parallel_ranges((blocks + 15) / 16, int64_t(rows) * in_features >= kParallelQuantizeValues,
                  [&](int64_t t0, int64_t t1) {
                    quantize_block_range(k, x, t0 * 16, std::min(blocks, t1 * 16), acts);
                  });
}

void qgemm_group_range(QgemmKernel k, QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
                       int out_features, int in_features, int group_begin, int group_end) {
  const QgemmTable& table = qgemm_table(k);
  (qgemm_is_k(t) ? table.groups_k : table.groups)(t, acts, packed, y, out_features, in_features, group_begin,
                                                  group_end);
}

void qgemm(QgemmKernel k, QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
           int out_features, int in_features) {
  if (qgemm_is_k(t)) return qgemm_k(k, t, acts, packed, y, out_features, in_features);
  const QgemmGroupsFn groups = qgemm_table(k).groups;
  const bool worth = gemm_worth_threads(acts.rows, out_features, in_features, 1);
  parallel_ranges(qgemm_groups(out_features), worth, [&](int64_t begin, int64_t end) {
    groups(t, acts, packed, y, out_features, in_features, int(begin), int(end));
  });
}

void qgemm_stacked(QgemmKernel k, const std::vector<QgemmPart>& parts, const QuantizedRows& acts, float* y,
                   int in_features, std::vector<std::vector<float>>& part_y) {
  const int rows = acts.rows;
  int groups = 0, columns = 0;
  part_y.resize(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    TS_CHECK(qgemm_supports(parts[p].type), "qgemm_stacked: ", quant_type_name(parts[p].type), " is not supported");
    groups += qgemm_groups(parts[p].out_features);
    columns += parts[p].out_features;
    part_y[p].resize(size_t(rows) * parts[p].out_features);
  }
  parallel_ranges(groups, gemm_worth_threads(rows, columns, in_features, 1), [&](int64_t begin, int64_t end) {
    int first_group = 0, first_column = 0;  // part p's groups and output columns start here
    for (size_t p = 0; p < parts.size(); first_group += qgemm_groups(parts[p].out_features),
                first_column += parts[p].out_features, ++p) {
      const QgemmPart& part = parts[p];
      const int g0 = int(std::max<int64_t>(begin - first_group, 0));
      const int g1 = int(std::min<int64_t>(end - first_group, qgemm_groups(part.out_features)));
      if (g0 >= g1) continue;
      qgemm_group_range(k, part.type, acts, part.packed, part_y[p].data(), part.out_features, in_features, g0, g1);
      // This range's columns of the part into y (each thread copies the groups it computed).
      const int c0 = g0 * kQGroup, c1 = std::min(part.out_features, g1 * kQGroup);
      for (int r = 0; r < rows; ++r)
        std::memcpy(y + size_t(r) * columns + first_column + c0, part_y[p].data() + size_t(r) * part.out_features + c0,
                    sizeof(float) * size_t(c1 - c0));
    }
  });
}

}  // namespace ts::kernels::cpu
