// The kernel tables (kernels/cpu/kernel_table.h), the one ISA dispatch: every variant this CPU runs has a complete
// table, set_isa switches which table the ops read, each variant reaches its own builds, and the processed
// distribution's double passes give the scalar build's bits on every variant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ops.h"

namespace ts::kernels {
namespace {

using cpu::kernel_table;
using cpu::KernelTable;

constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += " " + n;
  return s;
}

// Restores the variant active before the test.
class KernelTables : public ::testing::Test {
 protected:
  void TearDown() override { set_isa(saved_); }

 private:
  Isa saved_ = active_isa();
};

TEST_F(KernelTables, EverySupportedVariantHasACompleteTable) {
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) {  // amx on a CPU without it, say: its kernels must never be reached
      EXPECT_THROW(kernel_table(isa), Error) << isa_name(isa);
      continue;
    }
    const KernelTable& t = kernel_table(isa);
    EXPECT_EQ(t.isa, isa);
    EXPECT_TRUE(cpu::null_entries(t).empty()) << isa_name(isa) << " has no" << joined(cpu::null_entries(t));
    ASSERT_NE(t.qgemm, nullptr);
    EXPECT_TRUE(t.qgemm->supported) << isa_name(isa) << " runs " << t.qgemm->name;
  }
  for (cpu::QgemmKernel k : cpu::qgemm_supported_kernels()) {
    const cpu::QgemmTable& q = cpu::qgemm_table(k);
    EXPECT_EQ(q.kernel, k);
    EXPECT_TRUE(cpu::null_entries(q).empty()) << q.name << " has no" << joined(cpu::null_entries(q));
  }
}

TEST_F(KernelTables, SetIsaSwitchesTheTableTheOpsRead) {
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    EXPECT_EQ(&cpu::active_kernels(), &kernel_table(isa)) << isa_name(isa);
    EXPECT_EQ(simd_lanes(), kernel_table(isa).lanes);
    EXPECT_EQ(cpu::qgemm_active_kernel(), kernel_table(isa).qgemm->kernel);
  }
}

// Each width reaches its own builds: scalar, avx2 and avx512 share no kernel, and the bf16 variants are avx512
// with the bf16 GEMM replaced, avx512bf16 also the attention build (vdpbf16ps over bf16 K/V).
TEST_F(KernelTables, EachVariantReachesItsOwnBuilds) {
  const std::vector<Isa> isas = supported_isas();
  for (size_t a = 0; a < isas.size(); ++a) {
    for (size_t b = a + 1; b < isas.size(); ++b) {
      const KernelTable& x = kernel_table(isas[a]);
      const KernelTable& y = kernel_table(isas[b]);
      EXPECT_NE(x.linear_bf16, y.linear_bf16) << isa_name(isas[a]) << " vs " << isa_name(isas[b]);
      if (x.lanes == y.lanes) {  // avx512, avx512bf16, amx
        EXPECT_EQ(x.rmsnorm, y.rmsnorm);
        EXPECT_EQ(x.linear_f32, y.linear_f32);
        if ((isas[a] == Isa::Avx512Bf16) == (isas[b] == Isa::Avx512Bf16)) {  // avx512 and amx share their attention
          EXPECT_EQ(x.attention, y.attention);
          EXPECT_EQ(x.attention_tiled_bf16kv, y.attention_tiled_bf16kv);
        } else {
          EXPECT_NE(x.attention_bf16kv, y.attention_bf16kv);
          EXPECT_NE(x.attention_tiled_bf16kv, y.attention_tiled_bf16kv);
        }
        EXPECT_EQ(x.exp_nonpositive_f64, y.exp_nonpositive_f64);
        continue;
      }
      EXPECT_NE(x.add, y.add);
      EXPECT_NE(x.rmsnorm, y.rmsnorm);
      EXPECT_NE(x.rope, y.rope);
      EXPECT_NE(x.swiglu, y.swiglu);
      EXPECT_NE(x.softmax, y.softmax);
      EXPECT_NE(x.attention, y.attention);
      EXPECT_NE(x.attention_bf16kv, y.attention_bf16kv);
      EXPECT_NE(x.attention_tiled, y.attention_tiled);
      EXPECT_NE(x.attention_tiled_bf16kv, y.attention_tiled_bf16kv);
      EXPECT_NE(x.widen_row, y.widen_row);
      EXPECT_NE(x.softmax_scaled, y.softmax_scaled);
      EXPECT_NE(x.linear_f32, y.linear_f32);
      EXPECT_NE(x.exp_nonpositive_f64, y.exp_nonpositive_f64);
      EXPECT_NE(x.scale_to_f64_and_max, y.scale_to_f64_and_max);
      EXPECT_NE(x.sum_f64, y.sum_f64);
      EXPECT_NE(x.divide_f64, y.divide_f64);
    }
  }
}

// The double passes are plain IEEE operations in a fixed order: every variant's build gives the scalar build's bits,
// through the ops.h front-ends after set_isa, for lengths around the 32-lane exp block and the 8 partial sums.
TEST_F(KernelTables, DoublePassesGiveTheScalarBitsOnEveryVariant) {
  const KernelTable& scalar = kernel_table(Isa::Scalar);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<float> normal(0, 5);
  for (int n : {1, 7, 8, 31, 32, 33, 100, 4099}) {
    std::vector<double> x(n);  // [n] arguments <= 0 over the whole range: subnormal results, underflow, -inf, 0
    for (int i = 0; i < n; ++i) x[i] = -unit(rng) * (i % 3 == 0 ? 1.0 : i % 3 == 1 ? 40.0 : 760.0);
    x[0] = n > 1 ? -std::numeric_limits<double>::infinity() : 0.0;
    if (n > 2) x[n - 1] = 0.0;
    std::vector<float> logits(n);  // [n]
    for (float& v : logits) v = normal(rng);
    if (n > 4) logits[4] = -std::numeric_limits<float>::infinity();

    std::vector<double> want_exp(n), want_z(n), want_div = x;
    scalar.exp_nonpositive_f64(x.data(), n, want_exp.data());
    const double want_sum = scalar.sum_f64(want_exp.data(), n);
    scalar.divide_f64(want_div.data(), n, 3.7);
    int want_nans = -1;
    const double want_max = scalar.scale_to_f64_and_max(logits.data(), n, 0.7, want_z.data(), &want_nans);

    for (Isa isa : supported_isas()) {
      set_isa(isa);
      std::vector<double> exp(n), z(n), div = x;
      exp_nonpositive_f64(x.data(), n, exp.data());
      divide_f64(div.data(), n, 3.7);
      int nans = -1;
      const double max_z = scale_to_f64_and_max(logits.data(), n, 0.7, z.data(), &nans);
      EXPECT_EQ(std::memcmp(exp.data(), want_exp.data(), n * sizeof(double)), 0) << isa_name(isa) << " n " << n;
      EXPECT_EQ(std::memcmp(div.data(), want_div.data(), n * sizeof(double)), 0) << isa_name(isa) << " n " << n;
      EXPECT_EQ(std::memcmp(z.data(), want_z.data(), n * sizeof(double)), 0) << isa_name(isa) << " n " << n;
      EXPECT_EQ(sum_f64(exp.data(), n), want_sum) << isa_name(isa) << " n " << n;
      EXPECT_EQ(max_z, want_max);
      EXPECT_EQ(nans, want_nans);
    }
  }
}

// The draft softmax: the scalar variant runs the reference, the vector ones their two passes with the check between.
TEST_F(KernelTables, DraftSoftmaxRunsTheVariantsPasses) {
  const int n = 1000;
  const std::vector<float> logits = testing::random_normal(n, 4.0f, 5);  // [n]
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    std::vector<float> got(n), want(n);
    softmax_scaled(logits.data(), n, 1.3f, got.data());
    if (isa == Isa::Scalar) {
      ref::softmax_scaled(logits.data(), n, 1.3f, want.data());
    } else {
      exp_normalize(logits.data(), n, 1.3f, scaled_max(logits.data(), n, 1.3f), want.data());
    }
    EXPECT_EQ(testing::bit_differences(got.data(), want.data(), n), 0u) << isa_name(isa);
  }
}

}  // namespace
}  // namespace ts::kernels
