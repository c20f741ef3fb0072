// The quantized GEMM (kernels/cpu/qgemm.h): every variant this CPU runs equals the scalar reference bit for bit
// on ragged shapes, rows never depend on the batch, the threads or the tiling, and the scalar reference is the
// exact dot product of the dequantized weights with the dequantized activations up to f32 rounding.
#include "kernels/cpu/qgemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernel_test_util.h"
#include "kernels/quant.h"

namespace ts::kernels::cpu {
namespace {

using testing::bit_differences;
using testing::random_normal;
using testing::StreamedHint;

struct Packed {
  std::vector<uint8_t> blocks;  // [out][in / 32] GGUF blocks
  std::vector<uint8_t> packed;  // qgemm layout
};

Packed make_weights(QuantType t, int out, int in, uint32_t seed) {
  std::vector<float> w = random_normal(size_t(out) * in, 0.05f, seed);
  // Edge cases in the first rows: an all-zero block, a huge block, a block whose largest value is negative.
  if (out >= 3 && in >= 32) {
    for (int k = 0; k < 32; ++k) w[k] = 0.0f;
    for (int k = 0; k < 32; ++k) w[size_t(in) + k] *= 1e4f;
    w[size_t(2) * in + 5] = -3.0f;
  }
  Packed p;
  p.blocks.resize(size_t(out) * row_bytes(t, in));
  for (int o = 0; o < out; ++o) ref::quantize_row(t, w.data() + size_t(o) * in, p.blocks.data() + o * row_bytes(t, in), in);
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
// Last groups of 16, 7, 8, 12 and 3 valid outputs: avx2 computes a group as two 8-lane halves, each stored apart.
const Shape kShapes[] = {{16, 32}, {7, 64}, {40, 96}, {28, 160}, {131, 256}, {1024, 1024}};
// 6 = 4 + 2 rows (avx2's tiles); 12 and 17: one and two tiles of up to 16 rows (avx512 Q8_0, Q6_K).
const int kRows[] = {1, 3, 6, 8, 12, 17, 64};
const QuantType kTypes[] = {QuantType::Q8_0, QuantType::Q4_0};

class Qgemm : public ::testing::TestWithParam<QgemmKernel> {};

// Every field, on block counts below, at and past the avx512 quantizer's 16-block tiles (rows x in / 32 = 8, 40,
// 33, 96 blocks; a tile spans rows when a row has fewer than 16 blocks), with a zero block, a zero value, a huge
// value, tiny values and a block of one repeated value inside the tiles. The last two cases are large enough for
// threads to split the blocks (2 threads here against the scalar quantizer on 1): 17 x 1024 (544 blocks) and
// 9 x 3008 (846 blocks, the split falling inside rows).
TEST_P(Qgemm, QuantizedActivationsEqualScalar) {
  const struct { int rows, in; } cases[] = {{1, 256}, {5, 256}, {3, 352}, {2, 1536}, {17, 1024}, {9, 3008}};
  const int saved = num_threads();
  for (const auto& c : cases) {
    std::vector<float> x = random_normal(size_t(c.rows) * c.in, 1.0f, uint32_t(7 + c.in));
    x[3] = 0.0f;
    for (int k = 32; k < 64; ++k) x[k] = 0.0f;  // an all-zero block: d = 0, q = 0
    x[70] = 1e30f;
    for (int k = 96; k < 128; ++k) x[k] *= 1e-30f;  // tiny amax: 1 / d is huge but finite
    for (int k = 160; k < 192; ++k) x[k] = -0.75f;  // every value the block's amax
    QuantizedRows ref, got;
    set_num_threads(1);
    quantize_rows(QgemmKernel::Scalar, x.data(), c.rows, c.in, &ref);
    set_num_threads(2);
    quantize_rows(GetParam(), x.data(), c.rows, c.in, &got);
    EXPECT_EQ(ref.q, got.q) << c.rows << "x" << c.in;
    EXPECT_EQ(ref.sum, got.sum) << c.rows << "x" << c.in;
    EXPECT_EQ(ref.sum16, got.sum16) << c.rows << "x" << c.in;
    EXPECT_EQ(bit_differences(ref.d.data(), got.d.data(), ref.d.size()), 0u) << c.rows << "x" << c.in;
    ASSERT_EQ(ref.dsum.size(), got.dsum.size());
    EXPECT_EQ(bit_differences(ref.dsum.data(), got.dsum.data(), ref.dsum.size()), 0u) << c.rows << "x" << c.in;
    EXPECT_EQ(ref.sum_neg8, got.sum_neg8) << c.rows << "x" << c.in;
    EXPECT_EQ(ref.sum_neg128, got.sum_neg128) << c.rows << "x" << c.in;
    EXPECT_EQ(ref.sum16_neg32, got.sum16_neg32) << c.rows << "x" << c.in;
    for (size_t i = 0; i < ref.sum.size(); ++i) ASSERT_EQ(ref.sum_neg8[i], -8 * ref.sum[i]);  // the offsets' meaning
  }
  set_num_threads(saved);
}

TEST_P(Qgemm, EqualsScalarOnRaggedShapes) {
  for (bool streamed : {false, true})  // streamed: one row takes two groups on avx512-vnni
  for (QuantType t : kTypes) {
    const StreamedHint hint(streamed);
    for (Shape s : kShapes) {
      const Packed p = make_weights(t, s.out, s.in, uint32_t(s.out * 31 + s.in));
      for (int rows : kRows) {
        if (s.out * s.in > 1 << 16 && rows > 8) continue;  // keep the scalar reference quick
        const std::vector<float> x = random_normal(size_t(rows) * s.in, 1.0f, uint32_t(rows));
        const std::vector<float> want = run(QgemmKernel::Scalar, t, p, x, rows, s.out, s.in);
        const std::vector<float> got = run(GetParam(), t, p, x, rows, s.out, s.in);
        EXPECT_EQ(bit_differences(want.data(), got.data(), want.size()), 0u)
            << quant_type_name(t) << " " << s.out << "x" << s.in << " rows " << rows << (streamed ? " streamed" : "");
      }
    }
  }
}

TEST_P(Qgemm, RowsDoNotDependOnTheBatchOrThreads) {
  const int out = 520, in = 320, rows = 17;
  for (bool streamed : {false, true})  // streamed: each row alone takes two groups on avx512-vnni
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
          << quant_type_name(t) << " row " << r << (streamed ? " streamed" : "");
    }
    set_num_threads(saved);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Qgemm, ::testing::ValuesIn(qgemm_supported_kernels()),
                         [](const ::testing::TestParamInfo<QgemmKernel>& info) {
                           std::string name = qgemm_kernel_name(info.param);
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

// The scalar reference is the dot product of dequantized weights and dequantized activations: each block's
// integer sum is exact, so the only error is f32 rounding of d_w * d_x (one rounding) and of the accumulation
// (one per block): |y - exact| <= (nb + 1) * 2^-24 * sum_b |d_w d_x isum_b| (to first order).
// 512 inputs: two whole runs of 8 Q4_0 blocks (qgemm.h); 416: a run of 8 and one of 5.
TEST(QgemmReference, IsTheDotProductOfDequantizedValues) {
  const int out = 40, rows = 3;
  for (int in : {512, 416})
  for (QuantType t : kTypes) {
    const Packed p = make_weights(t, out, in, 3);
    const std::vector<float> x = random_normal(size_t(rows) * in, 1.0f, 9);
    QuantizedRows acts;
    quantize_rows(QgemmKernel::Scalar, x.data(), rows, in, &acts);
    std::vector<float> y(size_t(rows) * out);
    qgemm(QgemmKernel::Scalar, t, acts, p.packed.data(), y.data(), out, in);
    std::vector<float> w(in);
    const int nb = in / kQBlock;
    for (int o = 0; o < out; ++o) {
      ref::dequantize_row(t, p.blocks.data() + o * row_bytes(t, in), w.data(), in);
      for (int r = 0; r < rows; ++r) {
        double exact = 0, scale = 0;
        for (int k = 0; k < in; ++k) {
          const double xv = double(acts.d[size_t(r) * nb + k / kQBlock]) * acts.q[size_t(r) * in + k];
          exact += double(w[k]) * xv;
          scale += std::abs(double(w[k]) * xv);
        }
        const double bound = (nb + 2) * std::ldexp(1.0, -24) * scale + 1e-30;
        EXPECT_NEAR(y[size_t(r) * out + o], exact, bound) << quant_type_name(t) << " in " << in << " o " << o << " r " << r;
      }
    }
  }
}

// Activation quantization error: |x - d q| <= d / 2 per value, d = amax / 127 of its block.
TEST(QgemmReference, ActivationQuantizationIsRoundToNearest) {
  const std::vector<float> x = random_normal(4 * 128, 2.0f, 4);
  QuantizedRows acts;
  quantize_rows(QgemmKernel::Scalar, x.data(), 4, 128, &acts);
  for (size_t i = 0; i < x.size(); ++i) {
    const float d = acts.d[i / kQBlock];
    EXPECT_LE(std::abs(x[i] - d * acts.q[i]), d * 0.5f * (1 + 1e-6f)) << i;
    EXPECT_LE(std::abs(int(acts.q[i])), 127);
  }
}

}  // namespace
}  // namespace ts::kernels::cpu
