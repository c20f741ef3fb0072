// The K-quant integer GEMM (kernels/cpu/qgemm_k.h): every variant this CPU runs equals the scalar reference bit for
// bit on ragged shapes, rows never depend on the batch or the threads, the packing keeps GGUF's bytes per weight,
// and the scalar reference is the dot product of llama.cpp's dequantized weights with the dequantized activations
// up to f32 rounding.
#include "kernels/cpu/qgemm_k.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernel_test_util.h"
#include "kernels/linear.h"
#include "kernels/quant.h"

namespace ts::kernels::cpu {
namespace {

using testing::bit_differences;
using testing::kU32;
using testing::random_normal;
using testing::StreamedHint;

struct Packed {
  std::vector<uint8_t> blocks;  // [out][in / 256] GGUF blocks
  std::vector<uint8_t> packed;  // qgemm_k layout
};

Packed make_weights(QuantType t, int out, int in, uint32_t seed) {
  std::vector<float> w = random_normal(size_t(out) * in, 0.05f, seed);
  // Edge cases in the first rows: an all-zero super-block, a huge one, one whose values are all positive (Q4_K
  // min 0), a lone large negative value (Q6_K's scale maps to -128).
  if (out >= 4) {
    for (int k = 0; k < 256; ++k) w[k] = 0.0f;
    for (int k = 0; k < 256; ++k) w[size_t(in) + k] *= 1e4f;
    for (int k = 0; k < 256; ++k) w[size_t(2) * in + k] = std::abs(w[size_t(2) * in + k]) + 0.01f;
    w[size_t(3) * in + 5] = -3.0f;
  }
  Packed p;
  const size_t rb = row_bytes(t, in);
  p.blocks.resize(size_t(out) * rb);
  for (int o = 0; o < out; ++o) ref::quantize_row(t, w.data() + size_t(o) * in, p.blocks.data() + o * rb, in);
  p.packed.resize(qgemm_packed_bytes(t, out, in));
  qgemm_pack(t, p.blocks.data(), out, in, p.packed.data());
  return p;
}

std::vector<float> run(QgemmKernel k, QuantType t, const Packed& p, const std::vector<float>& x, int rows, int out,
                       int in) {
  QuantizedRows acts;
  quantize_rows(k, x.data(), rows, in, &acts);
  // 16 guard values past the last row: a tile that stores a partial group's missing lanes overwrites them.
  std::vector<float> y(size_t(rows) * out + 16, -1.0f);
  qgemm(k, t, acts, p.packed.data(), y.data(), out, in);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[size_t(rows) * out + i], -1.0f) << "written past the output, lane " << i;
  y.resize(size_t(rows) * out);
  return y;
}

struct Shape { int out, in; };
// Last groups of 16, 7, 8, 3 and 12 valid outputs: avx2 computes a group as two 8-lane halves, each stored apart.
const Shape kShapes[] = {{16, 256}, {7, 512}, {40, 1536}, {131, 256}, {28, 768}, {200, 512}};
// 6 = 4 + 2 rows (avx2's tiles); 12 and 17: one and two tiles of up to 16 rows (avx512 Q8_0, Q6_K); 1-6 rows: avx512
// tiles over two groups where the weights stream from DRAM.
const int kRows[] = {1, 2, 3, 5, 6, 8, 12, 17, 64};
const QuantType kTypes[] = {QuantType::Q4_K, QuantType::Q6_K};

class QgemmK : public ::testing::TestWithParam<QgemmKernel> {};

TEST_P(QgemmK, HalfBlockSumsEqualScalar) {
  std::vector<float> x = random_normal(3 * 512, 1.0f, 17);
  for (int k = 32; k < 48; ++k) x[k] = 0.0f;  // a zero half
  QuantizedRows ref, got;
  quantize_rows(QgemmKernel::Scalar, x.data(), 3, 512, &ref);
  quantize_rows(GetParam(), x.data(), 3, 512, &got);
  EXPECT_EQ(ref.sum16, got.sum16);
  ASSERT_EQ(ref.sum16.size(), size_t(3) * 16 * 2);
  for (size_t b = 0; b < ref.sum.size(); ++b) EXPECT_EQ(ref.sum16[2 * b] + ref.sum16[2 * b + 1], ref.sum[b]) << b;
}

TEST_P(QgemmK, EqualsScalarOnRaggedShapes) {
  for (bool streamed : {false, true})
  for (QuantType t : kTypes) {
    const StreamedHint hint(streamed);
    for (Shape s : kShapes) {
      const Packed p = make_weights(t, s.out, s.in, uint32_t(s.out * 31 + s.in));
      for (int rows : kRows) {
        if (s.out * s.in > 1 << 16 && rows > 17) continue;  // keep the scalar reference quick
        std::vector<float> x = random_normal(size_t(rows) * s.in, 1.0f, uint32_t(rows));
        for (int k = 0; k < 32; ++k) x[k] = 0.0f;  // an all-zero activation block: d = 0
        x[40] = 1e3f;                              // a block dominated by one value
        const std::vector<float> want = run(QgemmKernel::Scalar, t, p, x, rows, s.out, s.in);
        const std::vector<float> got = run(GetParam(), t, p, x, rows, s.out, s.in);
        EXPECT_EQ(bit_differences(want.data(), got.data(), want.size()), 0u)
            << quant_type_name(t) << " " << s.out << "x" << s.in << " rows " << rows << (streamed ? " streamed" : "");
      }
    }
  }
}

TEST_P(QgemmK, RowsDoNotDependOnTheBatchOrThreads) {
  const int out = 520, in = 768;
  // 19 rows: a 16-row tile and a 3-row one; 5 rows: one tile. Streamed, tiles of up to 6 rows (a row alone too) take
  // two groups.
  for (const auto& [rows, streamed] : {std::pair{19, false}, std::pair{19, true}, std::pair{5, true}})
  for (QuantType t : kTypes) {
    const StreamedHint hint(streamed);
    const Packed p = make_weights(t, out, in, 11);
    const std::vector<float> x = random_normal(size_t(rows) * in, 1.0f, 5);
    const int saved = num_threads();
    set_num_threads(2);
    const std::vector<float> batched = run(GetParam(), t, p, x, rows, out, in);
    set_num_threads(1);
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> xr(x.begin() + size_t(r) * in, x.begin() + size_t(r + 1) * in);
      const std::vector<float> alone = run(GetParam(), t, p, xr, 1, out, in);
      EXPECT_EQ(bit_differences(alone.data(), batched.data() + size_t(r) * out, out), 0u)
          << quant_type_name(t) << " row " << r << " of " << rows << (streamed ? " streamed" : "");
    }
    set_num_threads(saved);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, QgemmK, ::testing::ValuesIn(qgemm_supported_kernels()),
                         [](const ::testing::TestParamInfo<QgemmKernel>& info) {
                           std::string name = qgemm_kernel_name(info.param);
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(QgemmKPacking, KeepsGgufBytesPerWeight) {
  for (QuantType t : kTypes) {
    EXPECT_EQ(qgemm_packed_bytes(t, 32, 512), row_bytes(t, 512) * 32) << quant_type_name(t);
    EXPECT_EQ(qgemm_packed_bytes(t, 17, 256), row_bytes(t, 256) * 32) << quant_type_name(t);  // one padded group
  }
}

// Per 32-value activation block b of row r and output o, the exact terms the reference rounds (from the GGUF blocks,
// in double): Q4_K  d sc_j dx isum_b and dmin m_j dx sumx_b;  Q6_K  d dx sc lo and d dx sc hi (the two halves).
// Returns sum_b |terms| (A below).
double term_magnitude(QuantType t, const uint8_t* row_blocks, const QuantizedRows& acts, int r, int in) {
  const int nb = in / kQBlock;
  double total = 0;
  std::vector<float> w(256);
  for (int s = 0; s < in / 256; ++s) {
    if (t == QuantType::Q4_K) {
      const BlockQ4_K& blk = reinterpret_cast<const BlockQ4_K*>(row_blocks)[s];  // levels read from GGUF bytes
      for (int j = 0; j < 8; ++j) {
        const int b = s * 8 + j;
        uint8_t sc, m;
        q4k_scale_min(j, blk.scales, &sc, &m);
        double isum = 0;
        for (int k = 0; k < 32; ++k) {
          const int v = 32 * j + k, c = v / 64, l = v % 64;  // GGUF: byte 32c + l, low nibble; + 32: high nibble
          const int level = l < 32 ? blk.qs[32 * c + l] & 0x0F : blk.qs[32 * c + l - 32] >> 4;
          isum += double(level) * acts.q[size_t(r) * in + b * kQBlock + k];
        }
        const double dx = acts.d[size_t(r) * nb + b];
        total += std::abs(double(f16_to_f32(blk.d)) * sc * dx * isum) +
                 std::abs(double(f16_to_f32(blk.dmin)) * m * dx * acts.sum[size_t(r) * nb + b]);
      }
    } else {
      const BlockQ6_K& blk = reinterpret_cast<const BlockQ6_K*>(row_blocks)[s];
      ref::dequantize_row(t, &blk, w.data(), 256);
      for (int j = 0; j < 8; ++j) {
        const int b = s * 8 + j;
        double half[2] = {0, 0};  // sum_k w_k xq_k over each half = d sc lo and d sc hi, up to the rounding of w
        for (int k = 0; k < 32; ++k) half[k / 16] += double(w[32 * j + k]) * acts.q[size_t(r) * in + b * kQBlock + k];
        total += (std::abs(half[0]) + std::abs(half[1])) * acts.d[size_t(r) * nb + b];
      }
    }
  }
  return total;
}

// The reference (qgemm_k.h, Arithmetic) with exact integer sums and exact scale products d * sc, dmin * m rounds,
// per block: Q4_K fl(ds * dx) and fl(dx * sumx), then two fma's; Q6_K fl(dsc_hi * hi) and the fma making t (both
// within u of the block's two terms), then one fma. With A = the sum of the magnitudes of the exact terms
// (term_magnitude) and F = the fma's that add to the accumulator (2 per block for Q4_K, 1 for Q6_K), each of which
// rounds a partial sum no larger than A, to first order |y - exact| <= (F + 1) u A for Q4_K and (F + 2) u A for
// Q6_K, u = 2^-24. ref::dequantize_row rounds each weight once (Q4_K: d sc q - dmin m; Q6_K: d sc q), so the
// float64 dot product of its weights differs from the exact one by at most u sum_k |w_k x_k| = u S. Bound: that
// plus u S, with 2% slack for the second-order terms.
TEST(QgemmKReference, IsTheDotProductOfDequantizedValues) {
  const int out = 40, in = 1536, rows = 3;
  for (QuantType t : kTypes) {
    const Packed p = make_weights(t, out, in, 3);
    const std::vector<float> x = random_normal(size_t(rows) * in, 1.0f, 9);
    QuantizedRows acts;
    quantize_rows(QgemmKernel::Scalar, x.data(), rows, in, &acts);
    std::vector<float> y(size_t(rows) * out);
    qgemm(QgemmKernel::Scalar, t, acts, p.packed.data(), y.data(), out, in);
    std::vector<float> w(in);
    const int nb = in / kQBlock;
    const int fmas = t == QuantType::Q4_K ? 2 * nb : nb + 1;  // F, plus Q6_K's second rounding inside a block
    const size_t rb = row_bytes(t, in);
    for (int o = 0; o < out; ++o) {
      ref::dequantize_row(t, p.blocks.data() + o * rb, w.data(), in);
      for (int r = 0; r < rows; ++r) {
        double exact = 0, magnitude = 0;
        for (int k = 0; k < in; ++k) {
          const double xv = double(acts.d[size_t(r) * nb + k / kQBlock]) * acts.q[size_t(r) * in + k];
          exact += double(w[k]) * xv;
          magnitude += std::abs(double(w[k]) * xv);
        }
        const double terms = term_magnitude(t, p.blocks.data() + o * rb, acts, r, in);
        const double bound = 1.02 * ((fmas + 1) * kU32 * terms + kU32 * magnitude) + 1e-30;
        EXPECT_NEAR(y[size_t(r) * out + o], exact, bound) << quant_type_name(t) << " o " << o << " r " << r;
      }
    }
  }
}

// Linear takes the K types from blocks and from float weights and gives the qgemm result.
TEST(QgemmKLinear, FromBlocksRunsTheIntegerGemm) {
  const int out = 24, in = 512, rows = 5;
  for (QuantType t : kTypes) {
    const Packed p = make_weights(t, out, in, 21);
    const Linear l = Linear::from_blocks(p.blocks.data(), t, out, in);
    EXPECT_EQ(l.weight_bytes(), qgemm_packed_bytes(t, out, in));
    const std::vector<float> x = random_normal(size_t(rows) * in, 1.0f, 2);
    std::vector<float> y(size_t(rows) * out);
    l.forward(x.data(), rows, y.data());
    const std::vector<float> want = run(qgemm_active_kernel(), t, p, x, rows, out, in);
    EXPECT_EQ(bit_differences(want.data(), y.data(), y.size()), 0u) << quant_type_name(t);
  }
}

}  // namespace
}  // namespace ts::kernels::cpu
