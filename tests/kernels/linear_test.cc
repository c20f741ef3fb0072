// Linear against ref::linear with tolerances derived from K and the data, and the property greedy speculative
// decoding relies on: a row's output is bit-identical whatever the number of rows in the call.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace ts::kernels {
namespace {

using testing::bit_differences;
using testing::PerIsa;
using testing::kU32;
using testing::random_normal;

constexpr double kUBf16 = 1.0 / (1 << 8);  // unit roundoff of bf16 (8-bit significand): 2^-8 relative per value

std::vector<float> rounded_to_bf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// sum_i |x[r, i] w[o, i]| in double: the scale of every rounding error bound below.
double abs_dot(const float* x, const float* w, int k) {
  double s = 0;
  for (int i = 0; i < k; ++i) s += std::abs(double(x[i]) * w[i]);
  return s;
}

struct Shape { int out, in; };
// Model-sized shapes, and ragged ones: out and in not multiples of 8, 16 or the 64-column group, in odd; 168 =
// 2 groups + 5 of 8 avx2 panels, so the second pass of the avx2 3 x 3 tile (the 3-row tile of 7 rows = 4 + 3 in
// the batch-shape test) reaches past the last valid panel.
// {520, 300}: 312 KiB of bf16 weights, threaded from one row on (gemm_worth_threads), ragged last group.
const Shape kShapes[] = {{64, 32}, {1024, 1024}, {3072, 1024}, {67, 101}, {131, 77}, {9, 200}, {168, 90}, {520, 300}};
bool small(Shape s) { return s.out * s.in <= 1 << 16; }

class Linear : public PerIsa {};
TS_INSTANTIATE_PER_ISA(Linear);

TEST_P(Linear, ReportsBackend) {
  std::vector<float> w(64 * 32, 0.5f);
  for (DType c : {DType::BF16, DType::F32})
    std::printf("Linear %s on %s: %s\n", dtype_name(c), isa_name(GetParam()),
                kernels::Linear(w.data(), DType::F32, 64, 32, c).backend_name());
}

// Each y[r, o] is an f32 chain of K products (bf16 x bf16 products are exact in f32; f32 uses FMA), so
// |y - y_ref| <= K u sum|x w| (standard recursive summation bound, ref in double). The scalar variant's portable
// f32 loop rounds the product too (no FMA): 2 K u. Against the unrounded f32 data, bf16 compute adds the rounding
// of x and w: each product moves by <= 2 u_bf16 relative (2^-8 per product in total), hence the second bound.
// Rows 1, 3, 8, 17, 64 on the small ragged shapes; weights given as f32 and as bf16 checkpoints.
TEST_P(Linear, MatchesReference) {
  const bool scalar = GetParam() == Isa::Scalar;
  for (Shape s : kShapes) {
    if (scalar && s.out * s.in > 1 << 20) continue;  // the scalar GEMM is slow: keep the test fast
    for (int rows : small(s) ? std::vector<int>{1, 3, 8, 17, 64} : std::vector<int>{5}) {
      auto x = random_normal(size_t(rows) * s.in, 1.0f, s.out + rows);
      auto w = random_normal(size_t(s.out) * s.in, 0.05f, s.in);
      for (DType weight_dtype : {DType::F32, DType::BF16}) {
        if (weight_dtype == DType::BF16 && !small(s)) continue;
        const std::vector<uint16_t> w_bits = to_bf16_bits(w);
        const std::vector<float> w_data = weight_dtype == DType::BF16 ? rounded_to_bf16(w) : w;  // what Linear sees
        const void* w_arg = weight_dtype == DType::BF16 ? static_cast<const void*>(w_bits.data()) : w_data.data();
        for (DType compute : {DType::BF16, DType::F32}) {
          std::vector<float> ref(size_t(rows) * s.out), exact(ref.size()), mag(ref.size());
          ref::linear(x.data(), w_data.data(), ref.data(), rows, s.out, s.in, compute);
          ref::linear(x.data(), w_data.data(), exact.data(), rows, s.out, s.in);
          const auto xr = compute == DType::BF16 ? rounded_to_bf16(x) : x;
          const auto wr = compute == DType::BF16 ? rounded_to_bf16(w_data) : w_data;
          for (int r = 0; r < rows; ++r)
            for (int o = 0; o < s.out; ++o)
              mag[size_t(r) * s.out + o] = abs_dot(&xr[size_t(r) * s.in], &wr[size_t(o) * s.in], s.in);
          const double rounding = compute == DType::BF16 ? 2 * kUBf16 : 0.0;
          const double chain = (scalar && compute == DType::F32 ? 2 : 1) * s.in * kU32;
          kernels::Linear lin(w_arg, weight_dtype, s.out, s.in, compute);
          std::vector<float> y(ref.size());
          lin.forward(x.data(), rows, y.data());
          double worst_vs_ref = 0;  // observed error / sum|x w|, for the log
          for (size_t i = 0; i < y.size(); ++i) {
            worst_vs_ref = std::max(worst_vs_ref, std::abs(y[i] - double(ref[i])) / mag[i]);
            ASSERT_NEAR(y[i], ref[i], chain * mag[i] + 1e-30)
                << s.out << "x" << s.in << " rows " << rows << " " << dtype_name(compute) << " weights "
                << dtype_name(weight_dtype) << " " << lin.backend_name() << " i=" << i;
            ASSERT_NEAR(y[i], exact[i], (rounding + chain) * 1.01 * mag[i] + 1e-30);
          }
          if (rows == 5 || rows == 17)
            std::printf("%5dx%-5d rows %2d %s %s: max error / sum|xw| %.2e (bound %.1e)\n", s.out, s.in, rows,
                        dtype_name(compute), lin.backend_name(), worst_vs_ref, chain);
        }
      }
    }
  }
}

// Rows 1, 2, 3, 7, 8, 9, 13, 14, 16, 17, 33, 64 in one call (AVX2 tiles 7-9 and 13-14 rows as 6 + 1, 6 + 2, 6 + 3,
// 6 + 6 + 1, 6 + 6 + 2): every row's output must have the same bits as in the 64-row call, and as that row computed
// alone; also with 1 thread instead of the default.
TEST_P(Linear, RowOutputDoesNotDependOnBatchShape) {
  const int max_rows = 64;
  for (Shape s : kShapes) {
    if (GetParam() == Isa::Scalar && !small(s)) continue;  // scalar: small shapes only
    auto x = random_normal(size_t(max_rows) * s.in, 1.0f, s.in + 3);
    auto w = random_normal(size_t(s.out) * s.in, 0.05f, s.out + 3);
    for (DType compute : {DType::BF16, DType::F32}) {
      kernels::Linear lin(w.data(), DType::F32, s.out, s.in, compute);
      std::vector<float> full(size_t(max_rows) * s.out), y(full.size());
      lin.forward(x.data(), max_rows, full.data());
      for (int rows : {1, 2, 3, 7, 8, 9, 13, 14, 16, 17, 33, 64}) {
        // Start at a different row each time so row r is seen at several positions within a call.
        const int start = (rows * 5) % (max_rows - rows + 1);
        lin.forward(x.data() + size_t(start) * s.in, rows, y.data());
        ASSERT_EQ(bit_differences(y.data(), full.data() + size_t(start) * s.out, size_t(rows) * s.out), 0u)
            << s.out << "x" << s.in << " " << dtype_name(compute) << " " << lin.backend_name() << " rows=" << rows;
      }
      const int threads = num_threads();
      set_num_threads(1);
      lin.forward(x.data(), max_rows, y.data());
      set_num_threads(threads);
      ASSERT_EQ(bit_differences(y.data(), full.data(), full.size()), 0u) << "1 thread vs " << threads;
    }
  }
}

// The AVX2 and AVX-512 GEMMs are one source with the same per-element FMA order, so they agree bit for bit
// (a model gives the same tokens under either); runs where the CPU has both.
TEST(LinearAcrossIsas, Avx2AndAvx512GiveTheSameBits) {
  if (!isa_supported(Isa::Avx2) || !isa_supported(Isa::Avx512)) GTEST_SKIP() << "needs a CPU with AVX-512";
  const Isa saved = active_isa();
  for (Shape s : kShapes) {
    const int rows = 17;
    auto x = random_normal(size_t(rows) * s.in, 1.0f, s.in + 9);
    auto w = random_normal(size_t(s.out) * s.in, 0.05f, s.out + 9);
    for (DType compute : {DType::BF16, DType::F32}) {
      kernels::Linear lin(w.data(), DType::F32, s.out, s.in, compute);
      std::vector<float> y2(size_t(rows) * s.out), y512(y2.size());
      set_isa(Isa::Avx2);
      lin.forward(x.data(), rows, y2.data());
      set_isa(Isa::Avx512);
      lin.forward(x.data(), rows, y512.data());
      EXPECT_EQ(bit_differences(y2.data(), y512.data(), y2.size()), 0u) << s.out << "x" << s.in << " "
                                                                        << dtype_name(compute);
    }
  }
  set_isa(saved);
}

TEST_P(Linear, WeightDtypesConvertAtLoad) {
  const int out = 40, in = 24, rows = 3;
  auto w = random_normal(size_t(out) * in, 0.1f, 11);
  auto x = random_normal(size_t(rows) * in, 1.0f, 12);
  // F16 and BF16 checkpoints give the same product as F32 weights holding the same values.
  std::vector<uint16_t> f16(w.size());
  std::vector<float> w_f16(w.size());
  for (size_t i = 0; i < w.size(); ++i) f16[i] = f32_to_f16(w[i]), w_f16[i] = f16_to_f32(f16[i]);
  const std::vector<uint16_t> bf16 = to_bf16_bits(w);
  const std::vector<float> w_bf16 = rounded_to_bf16(w);
  for (DType compute : {DType::BF16, DType::F32}) {
    std::vector<float> a(size_t(rows) * out), b(a.size());
    kernels::Linear(f16.data(), DType::F16, out, in, compute).forward(x.data(), rows, a.data());
    kernels::Linear(w_f16.data(), DType::F32, out, in, compute).forward(x.data(), rows, b.data());
    EXPECT_EQ(bit_differences(a.data(), b.data(), a.size()), 0u) << dtype_name(compute);
    kernels::Linear(bf16.data(), DType::BF16, out, in, compute).forward(x.data(), rows, a.data());
    kernels::Linear(w_bf16.data(), DType::F32, out, in, compute).forward(x.data(), rows, b.data());
    EXPECT_EQ(bit_differences(a.data(), b.data(), a.size()), 0u) << dtype_name(compute);
  }
  kernels::Linear lin(w.data(), DType::F32, out, in, DType::BF16);
  EXPECT_EQ(lin.out_features(), out);
  EXPECT_EQ(lin.in_features(), in);
  EXPECT_EQ(lin.compute_type(), DType::BF16);
  EXPECT_GE(lin.weight_bytes(), size_t(out) * in * 2);
}

TEST_P(Linear, RejectsBadArguments) {
  std::vector<float> w(16, 1.0f), y(16);
  EXPECT_THROW(kernels::Linear(w.data(), DType::I32, 4, 4, DType::BF16), Error);
  EXPECT_THROW(kernels::Linear(w.data(), DType::F32, 4, 4, DType::F16), Error);
  EXPECT_THROW(kernels::Linear(w.data(), DType::F32, 0, 4, DType::F32), Error);
  kernels::Linear lin(w.data(), DType::F32, 4, 4, DType::F32);
  EXPECT_THROW(lin.forward(w.data(), 0, y.data()), Error);
}

// A quantized Linear built from f32, bf16 or f16 weights holds the blocks the reference quantizer makes of the
// widened values (the rows are widened by the variant's vector kernel, quantized a 16-row group at a time, and each
// group packed in place), on every variant: its outputs equal, bit for bit, those of a Linear made from those blocks.
// f16 weights include subnormals; 40 rows end in a partial group, 1 row is one.
class QuantizedLinear : public PerIsa {};
TS_INSTANTIATE_PER_ISA(QuantizedLinear);

TEST_P(QuantizedLinear, FromFloatWeightsEqualsBlocksOfTheWidenedValues) {
  const int in = 512, rows = 3;
  const std::vector<float> x = random_normal(size_t(rows) * in, 1.0f, 5);
  for (int out : {40, 1}) {
    std::vector<float> w = random_normal(size_t(out) * in, 0.05f, 17);
    for (size_t k = 0; k < w.size(); k += 7) w[k] *= 1e-4f;  // f16 subnormals
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<uint16_t> bits(w.size());
      std::vector<float> widened(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        bits[i] = dtype == DType::BF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
        widened[i] = dtype == DType::F32 ? w[i] : dtype == DType::BF16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
      }
      const void* weight = dtype == DType::F32 ? static_cast<const void*>(w.data()) : bits.data();
      for (QuantType t : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q6_K}) {
        std::vector<uint8_t> blocks(row_bytes(t, in) * out);
        for (int o = 0; o < out; ++o)
          ref::quantize_row(t, widened.data() + size_t(o) * in, blocks.data() + row_bytes(t, in) * o, in);
        std::vector<float> want(size_t(rows) * out), got(want.size());
        kernels::Linear::from_blocks(blocks.data(), t, out, in).forward(x.data(), rows, want.data());
        kernels::Linear(weight, dtype, out, in, t).forward(x.data(), rows, got.data());
        EXPECT_EQ(bit_differences(want.data(), got.data(), want.size()), 0u)
            << out << " rows " << dtype_name(dtype) << " " << quant_type_name(t);
      }
    }
  }
}

// A stacked Linear (parts in their own formats, one output row) gives each part's outputs bit for bit at its
// columns, for every row count (so it keeps batch invariance) and thread count, and reports the parts' formats and
// bytes. The second shape is big enough to be threaded (gemm_worth_threads), so the threads' ranges of groups
// start and end inside parts.
TEST_P(QuantizedLinear, StackedPartsEqualTheirOwnForwards) {
  const int in = 512;
  const QuantType part_type[] = {QuantType::Q4_K, QuantType::Q6_K, QuantType::Q8_0};
  const int shapes[2][3] = {{40, 17, 33},     // ragged: groups of 16 outputs cut short; one thread
                            {520, 263, 281}};  // 1064 x 512: threaded from one row on
  for (const auto& part_out : shapes) {
    std::vector<kernels::Linear> parts, singles;
    size_t bytes = 0;
    for (int p = 0; p < 3; ++p) {
      const std::vector<float> w = random_normal(size_t(part_out[p]) * in, 0.05f, 31 + p);
      parts.emplace_back(w.data(), DType::F32, part_out[p], in, part_type[p]);
      singles.emplace_back(w.data(), DType::F32, part_out[p], in, part_type[p]);
      bytes += singles.back().weight_bytes();
    }
    const kernels::Linear stacked = kernels::Linear::stacked(std::move(parts));
    const int out = part_out[0] + part_out[1] + part_out[2];
    EXPECT_EQ(stacked.out_features(), out);
    EXPECT_EQ(stacked.in_features(), in);
    EXPECT_EQ(stacked.weight_bytes(), bytes);
    EXPECT_TRUE(stacked.quantized());
    EXPECT_STREQ(stacked.format_name(), "Q4_K+Q6_K+Q8_0");
    const std::vector<float> x = random_normal(size_t(17) * in, 1.0f, 9);
    const int threads = num_threads();
    for (int t : {1, 2, 3}) {
      set_num_threads(t);
      for (int rows : {1, 3, 8, 17}) {
        std::vector<float> got(size_t(rows) * out, -1.0f);
        stacked.forward(x.data(), rows, got.data());
        int column = 0;
        for (int p = 0; p < 3; ++p) {
          std::vector<float> want(size_t(rows) * part_out[p]);
          singles[p].forward(x.data(), rows, want.data());
          for (int r = 0; r < rows; ++r)
            EXPECT_EQ(bit_differences(want.data() + size_t(r) * part_out[p], got.data() + size_t(r) * out + column,
                                      size_t(part_out[p])), 0u)
                << out << " outputs, threads " << t << " rows " << rows << " row " << r << " part " << p;
          column += part_out[p];
        }
      }
    }
    set_num_threads(threads);
  }
  std::vector<kernels::Linear> bad;
  bad.emplace_back(random_normal(size_t(16) * in, 0.05f, 1).data(), DType::F32, 16, in, QuantType::Q8_0);
  bad.emplace_back(random_normal(size_t(16) * 256, 0.05f, 2).data(), DType::F32, 16, 256, QuantType::Q8_0);
  EXPECT_THROW(kernels::Linear::stacked(std::move(bad)), Error);
}

// forward_columns gives forward()'s columns bit for bit: on the packed groups alone where the range starts on a
// group (64 float columns, 16 quantized; ending anywhere), through the whole product elsewhere (a stacked product,
// a ragged start), for every row count and thread count. 1088 x 512 weights are threaded from one row on.
TEST_P(QuantizedLinear, ForwardColumnsEqualsTheForwardsColumns) {
  const int in = 512, out = 1088;
  const std::vector<float> w = random_normal(size_t(out) * in, 0.05f, 41);
  std::vector<kernels::Linear> products;
  products.emplace_back(w.data(), DType::F32, out, in, DType::F32);
  products.emplace_back(to_bf16_bits(w).data(), DType::BF16, out, in, DType::BF16);
  for (QuantType t : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q6_K})
    products.emplace_back(w.data(), DType::F32, out, in, t);
  std::vector<kernels::Linear> parts;
  parts.emplace_back(w.data(), DType::F32, 512, in, QuantType::Q4_K);
  parts.emplace_back(w.data() + size_t(512) * in, DType::F32, out - 512, in, QuantType::Q6_K);
  products.push_back(kernels::Linear::stacked(std::move(parts)));
  const std::vector<float> x = random_normal(size_t(17) * in, 1.0f, 43);
  const int ranges[][2] = {{512, 1088}, {0, 64},    {256, 1024}, {64, 80},
                           {64, 150},   {16, 1088}, {100, 700},  {1087, 1088}};
  const int threads = num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    for (const kernels::Linear& product : products) {
      for (int rows : {1, 3, 8, 17}) {
        std::vector<float> all(size_t(rows) * out);
        product.forward(x.data(), rows, all.data());
        for (const auto& range : ranges) {
          const int cols = range[1] - range[0];
          std::vector<float> got(size_t(rows) * cols, -1.0f);
          product.forward_columns(x.data(), rows, range[0], range[1], got.data());
          for (int r = 0; r < rows; ++r)
            EXPECT_EQ(bit_differences(all.data() + size_t(r) * out + range[0], got.data() + size_t(r) * cols,
                                      size_t(cols)), 0u)
                << product.format_name() << " columns [" << range[0] << ", " << range[1] << ") threads " << t
                << " rows " << rows << " row " << r;
        }
      }
    }
  }
  set_num_threads(threads);
  EXPECT_THROW(products[0].forward_columns(x.data(), 1, 64, 64, nullptr), Error);
  EXPECT_THROW(products[0].forward_columns(x.data(), 1, 0, out + 1, nullptr), Error);
}

// swiglu_mlp gives, bit for bit, gate_up's forward, swiglu_rows and down's forward in turn: fused where both
// products are quantized (each thread's gate / up columns swiglu'd and quantized in place), in sequence elsewhere
// (bf16, a stacked gate_up), for every row and thread count. I = 768 (24 blocks of 32) is threaded from one row;
// I = 96 (3 blocks, split unevenly) from 17 rows.
TEST_P(QuantizedLinear, SwigluMlpEqualsItsThreeSteps) {
  const int hidden = 512;
  const std::vector<float> x = random_normal(size_t(17) * hidden, 1.0f, 47);
  const int threads = num_threads();
  for (int inter : {768, 96}) {
    const std::vector<float> w_gu = random_normal(size_t(2) * inter * hidden, 0.05f, 51);
    const std::vector<float> w_down = random_normal(size_t(hidden) * inter, 0.05f, 53);
    const bool k_quants = inter % 256 == 0;
    std::vector<std::pair<kernels::Linear, kernels::Linear>> mlps;  // (gate_up, down)
    mlps.emplace_back(kernels::Linear(to_bf16_bits(w_gu).data(), DType::BF16, 2 * inter, hidden, DType::BF16),
                      kernels::Linear(to_bf16_bits(w_down).data(), DType::BF16, hidden, inter, DType::BF16));
    for (QuantType t : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q6_K}) {
      const QuantType down_type = k_quants ? t : QuantType::Q8_0;
      mlps.emplace_back(kernels::Linear(w_gu.data(), DType::F32, 2 * inter, hidden, t),
                        kernels::Linear(w_down.data(), DType::F32, hidden, inter, down_type));
    }
    std::vector<kernels::Linear> parts;  // gate in Q4_K, up in Q6_K: a stacked gate_up runs the three steps
    parts.emplace_back(w_gu.data(), DType::F32, inter, hidden, QuantType::Q4_K);
    parts.emplace_back(w_gu.data() + size_t(inter) * hidden, DType::F32, inter, hidden, QuantType::Q6_K);
    mlps.emplace_back(kernels::Linear::stacked(std::move(parts)),
                      kernels::Linear(w_down.data(), DType::F32, hidden, inter, QuantType::Q4_0));
    for (const auto& [gate_up, down] : mlps) {
      for (int t : {1, 2, 3}) {
        set_num_threads(t);
        for (int rows : {1, 3, 8, 17}) {
          std::vector<float> gu(size_t(rows) * 2 * inter), act(size_t(rows) * inter), want(size_t(rows) * hidden);
          gate_up.forward(x.data(), rows, gu.data());
          swiglu_rows(gu.data(), rows, inter, act.data());
          down.forward(act.data(), rows, want.data());
          std::vector<float> got(want.size(), -1.0f);
          kernels::Linear::swiglu_mlp(gate_up, down, x.data(), rows, got.data());
          EXPECT_EQ(bit_differences(want.data(), got.data(), want.size()), 0u)
              << gate_up.format_name() << " / " << down.format_name() << " I " << inter << " threads " << t
              << " rows " << rows;
        }
      }
    }
  }
  set_num_threads(threads);
  const kernels::Linear gate_up(random_normal(size_t(2) * 64 * hidden, 0.05f, 1).data(), DType::F32, 128, hidden,
                                QuantType::Q8_0);
  const kernels::Linear down(random_normal(size_t(hidden) * 96, 0.05f, 2).data(), DType::F32, hidden, 96,
                             QuantType::Q8_0);
  std::vector<float> y(hidden);
  EXPECT_THROW(kernels::Linear::swiglu_mlp(gate_up, down, x.data(), 1, y.data()), Error);
}

}  // namespace
}  // namespace ts::kernels
