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

namespace ts::kernels {
namespace {

using testing::bit_differences;
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

std::vector<LinearBackend> backends_to_test() {
  std::vector<LinearBackend> b = {LinearBackend::Auto, LinearBackend::Portable, LinearBackend::OneDnn};
  return b;
}

struct Shape { int out, in; };
const Shape kShapes[] = {{64, 32}, {1024, 1024}, {3072, 1024}, {67, 101}};

TEST(Linear, ReportsBackend) {
  std::vector<float> w(64 * 32, 0.5f);
  for (DType c : {DType::BF16, DType::F32})
    std::printf("Linear %s default backend: %s\n", dtype_name(c), Linear(w.data(), DType::F32, 64, 32, c).backend_name());
}

// Each y[r, o] is an f32 chain of K exact products (bf16 x bf16 products are exact in f32; f32 uses FMA), so
// |y - y_ref| <= K u sum|x w| (standard recursive summation bound, ref in double). Against the unrounded f32
// data, bf16 compute adds the rounding of x and w: each product moves by <= 2 u_bf16 relative (2^-8 per
// product in total), hence the second bound.
TEST(Linear, MatchesReference) {
  for (Shape s : kShapes) {
    const int rows = 5;
    auto x = random_normal(size_t(rows) * s.in, 1.0f, s.out);
    auto w = random_normal(size_t(s.out) * s.in, 0.05f, s.in);
    for (DType compute : {DType::BF16, DType::F32}) {
      std::vector<float> ref(size_t(rows) * s.out), exact(ref.size()), mag(ref.size());
      ref::linear(x.data(), w.data(), ref.data(), rows, s.out, s.in, compute);
      ref::linear(x.data(), w.data(), exact.data(), rows, s.out, s.in);
      const auto xr = compute == DType::BF16 ? rounded_to_bf16(x) : x;
      const auto wr = compute == DType::BF16 ? rounded_to_bf16(w) : w;
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < s.out; ++o) mag[size_t(r) * s.out + o] = abs_dot(&xr[size_t(r) * s.in], &wr[size_t(o) * s.in], s.in);
      const double rounding = compute == DType::BF16 ? 2 * kUBf16 : 0.0;
      for (LinearBackend backend : backends_to_test()) {
        if (backend == LinearBackend::Portable && s.out * s.in > 1 << 20) continue;  // scalar: keep the test fast
        Linear lin(w.data(), DType::F32, s.out, s.in, compute, backend);
        std::vector<float> y(ref.size());
        lin.forward(x.data(), rows, y.data());
        double worst_vs_ref = 0, worst_vs_exact = 0;  // observed error / sum|x w|, for the log
        for (size_t i = 0; i < y.size(); ++i) {
          worst_vs_ref = std::max(worst_vs_ref, std::abs(y[i] - double(ref[i])) / mag[i]);
          worst_vs_exact = std::max(worst_vs_exact, std::abs(y[i] - double(exact[i])) / mag[i]);
          ASSERT_NEAR(y[i], ref[i], s.in * kU32 * mag[i] + 1e-30)
              << s.out << "x" << s.in << " " << dtype_name(compute) << " " << lin.backend_name() << " i=" << i;
          ASSERT_NEAR(y[i], exact[i], (rounding + s.in * kU32) * 1.01 * mag[i] + 1e-30);
        }
        if (backend == LinearBackend::Auto)
          std::printf("%5dx%-5d %s: max error / sum|xw|: %.2e vs rounded ref (bound %.1e), %.2e vs f32 data (bound %.1e)\n",
                      s.out, s.in, dtype_name(compute), worst_vs_ref, s.in * kU32, worst_vs_exact,
                      (rounding + s.in * kU32) * 1.01);
      }
    }
  }
}

// Rows 1, 2, 3, 7, 8, 16, 33, 64 in one call: every row's output must have the same bits as in the 64-row call,
// and as that row computed alone; also with 1 thread instead of the default.
TEST(Linear, RowOutputDoesNotDependOnBatchShape) {
  const int max_rows = 64;
  for (Shape s : kShapes) {
    auto x = random_normal(size_t(max_rows) * s.in, 1.0f, s.in + 3);
    auto w = random_normal(size_t(s.out) * s.in, 0.05f, s.out + 3);
    for (DType compute : {DType::BF16, DType::F32}) {
      for (LinearBackend backend : backends_to_test()) {
        if (backend == LinearBackend::Portable && s.out * s.in > 1 << 16) continue;  // scalar: small shapes only
        Linear lin(w.data(), DType::F32, s.out, s.in, compute, backend);
        std::vector<float> full(size_t(max_rows) * s.out), y(full.size());
        lin.forward(x.data(), max_rows, full.data());
        for (int rows : {1, 2, 3, 7, 8, 16, 33, 64}) {
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
}

TEST(Linear, WeightDtypesConvertAtLoad) {
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
    Linear(f16.data(), DType::F16, out, in, compute).forward(x.data(), rows, a.data());
    Linear(w_f16.data(), DType::F32, out, in, compute).forward(x.data(), rows, b.data());
    EXPECT_EQ(bit_differences(a.data(), b.data(), a.size()), 0u) << dtype_name(compute);
    Linear(bf16.data(), DType::BF16, out, in, compute).forward(x.data(), rows, a.data());
    Linear(w_bf16.data(), DType::F32, out, in, compute).forward(x.data(), rows, b.data());
    EXPECT_EQ(bit_differences(a.data(), b.data(), a.size()), 0u) << dtype_name(compute);
  }
  Linear lin(w.data(), DType::F32, out, in, DType::BF16);
  EXPECT_EQ(lin.out_features(), out);
  EXPECT_EQ(lin.in_features(), in);
  EXPECT_EQ(lin.compute_type(), DType::BF16);
  EXPECT_GE(lin.weight_bytes(), size_t(out) * in * 2);
}

TEST(Linear, RejectsBadArguments) {
  std::vector<float> w(16, 1.0f), y(16);
  EXPECT_THROW(Linear(w.data(), DType::I32, 4, 4, DType::BF16), Error);
  EXPECT_THROW(Linear(w.data(), DType::F32, 4, 4, DType::F16), Error);
  EXPECT_THROW(Linear(w.data(), DType::F32, 0, 4, DType::F32), Error);
  Linear lin(w.data(), DType::F32, 4, 4, DType::F32);
  EXPECT_THROW(lin.forward(w.data(), 0, y.data()), Error);
}

}  // namespace
}  // namespace ts::kernels
