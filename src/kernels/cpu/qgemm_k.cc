// The K-quant integer GEMM's packing, its scalar reference (the definition every SIMD variant must equal bit for
// bit) and its split over threads (each variant's kernels: kernel_table.h). Layout and arithmetic: qgemm_k.h.
#include "kernels/cpu/qgemm_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/parallel.h"

namespace ts::kernels::cpu {

namespace {

// Byte of k (0..31) of a 32-value nibble block in the [4 quads][16 lanes][4 bytes] layout, and its shift.
size_t nibble_byte(int lane, int k) { return size_t(((k % 16) / 4) * kQGroup + lane) * 4 + k % 4; }
int nibble_shift(int k) { return k < 16 ? 0 : 4; }

// Q6_K's high bits: quad j (k = 4j..4j+3) of a block sits in pair (j % 4) / 2 at bit position hi_pos(j).
int q6_hi_pos(int j) { return (j % 4 % 2) * 4 + (j / 4) * 2; }

// One row's super-block into its lane of a group super-block (sb, zeroed: padding lanes stay zero), byte by byte:
// each packed byte combines two GGUF nibbles or four 2-bit fields whose places follow from the two layouts
// (qgemm_k.h, and ref::dequantize_q4_k / q6_k for GGUF's). Packing is most of a K-quant file's load
// (docs/results/optimization-notes.md, "K-quant packing byte by byte").
void pack_q4k_lane(const BlockQ4_K& b, int lane, uint8_t* sb) {
  std::memcpy(sb + 2 * lane, &b.d, 2);
  std::memcpy(sb + 32 + 2 * lane, &b.dmin, 2);
  uint8_t sc[kQBlocksPerSuper], m[kQBlocksPerSuper];
  for (int j = 0; j < kQBlocksPerSuper; ++j) q4k_scale_min(j, b.scales, &sc[j], &m[j]);
  uint8_t* lo = sb + 64;    // [8 j][16 lanes]
  uint8_t* hi = sb + 192;   // [4 i][16 lanes]
  for (int j = 0; j < kQBlocksPerSuper; ++j) lo[j * kQGroup + lane] = uint8_t((sc[j] & 0x0F) | (m[j] & 0x0F) << 4);
  for (int i = 0; i < 4; ++i) {
    const int low_half = (sc[i] >> 4) | (m[i] >> 4) << 2, high_half = (sc[i + 4] >> 4) | (m[i + 4] >> 4) << 2;
    hi[i * kQGroup + lane] = uint8_t(low_half | high_half << 4);
  }
  // Sub-block j = 2c + h holds the low (h = 0) or high (h = 1) nibbles of GGUF bytes 32c .. 32c + 31; packed byte
  // n (quad n / 4, byte n % 4) holds its values n and 16 + n.
  for (int j = 0; j < kQBlocksPerSuper; ++j) {
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    uint8_t* dst = sb + 256 + j * 256 + lane * 4;
    for (int n = 0; n < 16; ++n) {
      dst[(n / 4) * kQGroup * 4 + n % 4] = uint8_t(((q[n] >> shift) & 0x0F) | ((q[16 + n] >> shift) & 0x0F) << 4);
    }
  }
}

void pack_q6k_lane(const BlockQ6_K& b, int lane, uint8_t* sb) {
  std::memcpy(sb + 2 * lane, &b.d, 2);
  for (int j = 0; j < 16; ++j) sb[32 + j * kQGroup + lane] = uint8_t(b.scales[j]);
  for (int i = 0; i < kQBlocksPerSuper; ++i) {
    // Block i is part i % 4 of GGUF half i / 4: its low nibbles from ql (low or high nibble of one 32-byte run), its
    // top bits from qh at 2 * part.
    const int part = i % 4;
    const uint8_t* ql = b.ql + 64 * (i / 4) + (part % 2) * 32;
    const uint8_t* qh = b.qh + 32 * (i / 4);
    uint8_t low4[kQBlock], high2[kQBlock];
    for (int k = 0; k < kQBlock; ++k) {
      low4[k] = uint8_t((ql[k] >> (part < 2 ? 0 : 4)) & 0x0F);
      high2[k] = uint8_t((qh[k] >> (2 * part)) & 3);
    }
    uint8_t* low = sb + 288 + i * 384 + lane * 4;
    uint8_t* high = sb + 288 + i * 384 + 256 + lane * 4;  // [2 pairs][16 lanes][4 bytes]
    for (int n = 0; n < 16; ++n) low[(n / 4) * kQGroup * 4 + n % 4] = uint8_t(low4[n] | low4[16 + n] << 4);
    for (int p = 0; p < 2; ++p) {
      for (int t = 0; t < 4; ++t) {  // quads 2p, 2p + 4, 2p + 1, 2p + 5 at bits 0, 2, 4, 6 (q6_hi_pos)
        high[p * kQGroup * 4 + t] = uint8_t(high2[8 * p + t] | high2[8 * p + 16 + t] << 2 | high2[8 * p + 4 + t] << 4 |
                                            high2[8 * p + 20 + t] << 6);
      }
    }
  }
}

// The scalar reference reads the packed layout back with these.
struct Q4KScales {
  float ds, dm;  // d * sc, dmin * m (exact)
};
Q4KScales q4k_packed_scales(const uint8_t* sb, int lane, int j) {
  uint16_t d, dmin;
  std::memcpy(&d, sb + 2 * lane, 2);
  std::memcpy(&dmin, sb + 32 + 2 * lane, 2);
  const uint8_t lo = sb[64 + j * kQGroup + lane];
  const uint8_t hi = uint8_t(sb[192 + (j % 4) * kQGroup + lane] >> (j < 4 ? 0 : 4));
  const int sc = (lo & 0x0F) | (hi & 3) << 4;
  const int m = (lo >> 4) | ((hi >> 2) & 3) << 4;
  return {f16_to_f32(d) * float(sc), f16_to_f32(dmin) * float(m)};
}

int q4k_packed_level(const uint8_t* sb, int lane, int j, int k) {
  return (sb[256 + j * 256 + nibble_byte(lane, k)] >> nibble_shift(k)) & 0x0F;
}

int q6k_packed_level(const uint8_t* sb, int lane, int i, int k) {
  const uint8_t* low = sb + 288 + i * 384;
  const int j = k / 4;
  const int low4 = (low[nibble_byte(lane, k)] >> nibble_shift(k)) & 0x0F;
  const int high2 = (low[256 + ((j % 4 / 2) * kQGroup + lane) * 4 + k % 4] >> q6_hi_pos(j)) & 3;
  return low4 | high2 << 4;
}

void groups_q4k_scalar(const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features, int in_features,
                       int group_begin, int group_end) {
  const int nb = in_features / kQBlock, ns = in_features / kQSuper;
  for (int g = group_begin; g < group_end; ++g) {
    for (int r = 0; r < acts.rows; ++r) {
      float acc[kQGroup] = {};
      for (int s = 0; s < ns; ++s) {
        const uint8_t* sb = packed + (size_t(g) * ns + s) * kQ4KGroupSuperBytes;
        for (int j = 0; j < kQBlocksPerSuper; ++j) {
          const int b = s * kQBlocksPerSuper + j;
          const int8_t* xq = acts.q.data() + size_t(r) * in_features + b * kQBlock;
          const float dx = acts.d[size_t(r) * nb + b];
          const float dsum = acts.dsum[size_t(r) * nb + b];
          for (int lane = 0; lane < kQGroup; ++lane) {
            int32_t isum = 0;
            for (int k = 0; k < kQBlock; ++k) isum += q4k_packed_level(sb, lane, j, k) * xq[k];
            const Q4KScales sc = q4k_packed_scales(sb, lane, j);
            acc[lane] = std::fma(sc.ds * dx, float(isum), acc[lane]);
            acc[lane] = std::fma(-sc.dm, dsum, acc[lane]);
          }
        }
      }
      for (int lane = 0; lane < kQGroup; ++lane) {
        const int o = g * kQGroup + lane;
        if (o < out_features) y[size_t(r) * out_features + o] = acc[lane];
      }
    }
  }
}

void groups_q6k_scalar(const QuantizedRows& acts, const uint8_t* packed, float* y, int out_features, int in_features,
                       int group_begin, int group_end) {
  const int nb = in_features / kQBlock, ns = in_features / kQSuper;
  for (int g = group_begin; g < group_end; ++g) {
    for (int r = 0; r < acts.rows; ++r) {
      float acc[kQGroup] = {};
      for (int s = 0; s < ns; ++s) {
        const uint8_t* sb = packed + (size_t(g) * ns + s) * kQ6KGroupSuperBytes;
        for (int i = 0; i < kQBlocksPerSuper; ++i) {
          const int b = s * kQBlocksPerSuper + i;
          const int8_t* xq = acts.q.data() + size_t(r) * in_features + b * kQBlock;
          const float dx = acts.d[size_t(r) * nb + b];
          const int32_t* sum16 = acts.sum16.data() + (size_t(r) * nb + b) * 2;
          for (int lane = 0; lane < kQGroup; ++lane) {
            int32_t half[2] = {-32 * sum16[0], -32 * sum16[1]};
            for (int k = 0; k < kQBlock; ++k) half[k / 16] += q6k_packed_level(sb, lane, i, k) * xq[k];
            uint16_t d;
            std::memcpy(&d, sb + 2 * lane, 2);
            const float dsc_lo = f16_to_f32(d) * float(int8_t(sb[32 + (2 * i) * kQGroup + lane]));  // exact
            const float dsc_hi = f16_to_f32(d) * float(int8_t(sb[32 + (2 * i + 1) * kQGroup + lane]));
            const float t = std::fma(dsc_lo, float(half[0]), dsc_hi * float(half[1]));
            acc[lane] = std::fma(t, dx, acc[lane]);
          }
        }
      }
      for (int lane = 0; lane < kQGroup; ++lane) {
        const int o = g * kQGroup + lane;
        if (o < out_features) y[size_t(r) * out_features + o] = acc[lane];
      }
    }
  }
}

}  // namespace

void qgemm_k_pack(QuantType t, const void* blocks, int out_features, int in_features, uint8_t* packed) {
  TS_CHECK(qgemm_is_k(t), "qgemm_k_pack: ", quant_type_name(t), " is not a K-quant");
  TS_CHECK(in_features % kQSuper == 0, "qgemm_k_pack: in_features ", in_features, " is not a multiple of 256");
  const int ns = in_features / kQSuper;
  const size_t gsb = qgemm_k_group_super_bytes(t);
  // Groups of kQGroup rows are independent: packed on the kernels' threads for big layers, each range zeroing its
  // own bytes first (padding rows stay all zero).
  const int groups = (out_features + kQGroup - 1) / kQGroup;
  parallel_ranges(groups, int64_t(out_features) * in_features >= (int64_t(1) << 22), [&](int64_t g0, int64_t g1) {
    std::memset(packed + size_t(g0) * ns * gsb, 0, size_t(g1 - g0) * ns * gsb);
    for (int o = int(g0) * kQGroup; o < std::min(out_features, int(g1) * kQGroup); ++o) {
      const int g = o / kQGroup, lane = o % kQGroup;
      for (int s = 0; s < ns; ++s) {
        uint8_t* sb = packed + (size_t(g) * ns + s) * gsb;
        if (t == QuantType::Q4_K) {
          pack_q4k_lane(static_cast<const BlockQ4_K*>(blocks)[size_t(o) * ns + s], lane, sb);
        } else {
          pack_q6k_lane(static_cast<const BlockQ6_K*>(blocks)[size_t(o) * ns + s], lane, sb);
        }
      }
    }
  });
}

void qgemm_groups_k_scalar(QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
                           int out_features, int in_features, int group_begin, int group_end) {
  if (t == QuantType::Q4_K) {
    return groups_q4k_scalar(acts, packed, y, out_features, in_features, group_begin, group_end);
  }
  groups_q6k_scalar(acts, packed, y, out_features, in_features, group_begin, group_end);
}

void qgemm_k(QgemmKernel k, QuantType t, const QuantizedRows& acts, const uint8_t* packed, float* y,
             int out_features, int in_features) {
  TS_CHECK(qgemm_is_k(t) && in_features % kQSuper == 0, "qgemm_k: cannot run ", quant_type_name(t), " with ",
           in_features, " inputs");
  const QgemmGroupsFn groups_k = qgemm_table(k).groups_k;
  const bool worth = gemm_worth_threads(acts.rows, out_features, in_features, 1);
  parallel_ranges(qgemm_groups(out_features), worth, [&](int64_t begin, int64_t end) {
    groups_k(t, acts, packed, y, out_features, in_features, int(begin), int(end));
  });
}

}  // namespace ts::kernels::cpu
