// Fast element-wise and row-wise ops (ops.h) against the double-precision references, with tolerances derived
// from each op's rounding analysis, plus the batch-invariance property every op must keep; every test runs once
// per ISA variant the CPU supports (Isa/Ops.<name>/<variant>).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace ts::kernels {
namespace {

using testing::bit_differences;
using testing::PerIsa;
using testing::kU32;
using testing::random_normal;

// The default RoPE frequencies for theta and head_dim (kernels::rope_default_inv_freq): [head_dim / 2].
std::vector<float> freqs(float theta, int head_dim) {
  std::vector<float> f(std::max(head_dim / 2, 1));
  if (head_dim % 2 == 0) rope_default_inv_freq(theta, head_dim, f.data());
  return f;
}

class Ops : public PerIsa {};
TS_INSTANTIATE_PER_ISA(Ops);

TEST_P(Ops, ReportsIsa) {
  EXPECT_EQ(active_isa(), GetParam());
  EXPECT_STREQ(ops_isa(), isa_name(GetParam()));
  EXPECT_EQ(double(simd_lanes()), lanes());
  std::printf("ops ISA: %s (supported: %s)\n", ops_isa(), isa_summary().c_str());
}

TEST_P(Ops, AddMatchesReferenceExactly) {
  for (int64_t n : {1, 15, 16, 17, 1000, 200003}) {
    auto a = random_normal(n, 1.0f, 1), b = random_normal(n, 1.0f, 2);
    auto fast = a, ref = a;
    add(fast.data(), b.data(), n);
    ref::add(ref.data(), b.data(), n);
    EXPECT_EQ(bit_differences(fast.data(), ref.data(), n), 0u) << n;  // one IEEE add per element: exact
  }
}

// to_bf16_bits against core's f32_to_bf16, element by element: ties (both ways), the rounding carry into the
// exponent, infinities, NaNs (kept quiet), denormals, signed zeros, and every tail length of a vector; no write
// past n.
TEST_P(Ops, ToBf16BitsEqualsScalarConversion) {
  std::vector<float> specials;
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                        0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x00000001u, 0x807fffffu, 0x007f8000u,
                        0x80000000u, 0x00000000u, 0x477fe000u, 0xc77ff000u}) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    specials.push_back(f);
  }
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(15), int64_t(16), int64_t(17),
                    int64_t(specials.size()), int64_t(1000), int64_t(4099)}) {
    std::vector<float> x = random_normal(n, 3.0f, 11);
    for (int64_t i = 0; i < n && i < int64_t(specials.size()); ++i) x[size_t(i)] = specials[size_t(i)];
    std::vector<uint16_t> bits(size_t(n) + 16, 0xabcd);
    to_bf16_bits(x.data(), n, bits.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits[size_t(i)], f32_to_bf16(x[size_t(i)])) << "n " << n << " at " << i;
    for (size_t i = size_t(n); i < bits.size(); ++i) ASSERT_EQ(bits[i], 0xabcd) << "wrote past n = " << n;
  }
}

TEST_P(Ops, RmsnormMatchesReference) {
  for (int dim : {1, 7, 16, 64, 100, 1024, 2049}) {
    const int rows = 5;
    auto x = random_normal(size_t(rows) * dim, 3.0f, dim);
    auto w = random_normal(dim, 1.0f, dim + 1);
    std::vector<float> fast(x.size()), ref(x.size());
    rmsnorm(x.data(), w.data(), fast.data(), rows, dim, 1e-6f);
    ref::rmsnorm(x.data(), w.data(), ref.data(), rows, dim, 1e-6f);
    // The mean square is a sum of positive terms over chains of dim/W FMAs (W lanes) plus a W-lane reduction:
    // relative error <= (dim/W + 4) u; the rsqrt halves it and adds ~2 u; two products add 2 u. Factor 2 for slack.
    const double rel = 2.0 * ((dim / lanes() + 4.0) / 2.0 + 4.0) * kU32;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(fast[i], ref[i], rel * std::abs(ref[i]) + 1e-30) << dim << " " << i;
    // In place gives the same bits.
    auto in_place = x;
    rmsnorm(in_place.data(), w.data(), in_place.data(), rows, dim, 1e-6f);
    EXPECT_EQ(bit_differences(in_place.data(), fast.data(), x.size()), 0u);
  }
}

TEST_P(Ops, RopeMatchesReferenceAndHuggingFaceDefinition) {
  for (int head_dim : {32, 64, 128, 6}) {
    const int rows = 4, heads = 3;
    auto x = random_normal(size_t(rows) * heads * head_dim, 1.0f, head_dim);
    std::vector<int32_t> pos = {0, 1, 517, 32767};
    auto fast = x, ref = x;
    rope(fast.data(), pos.data(), rows, heads, head_dim, freqs(1e6f, head_dim).data(), 1.0f);
    ref::rope(ref.data(), pos.data(), rows, heads, head_dim, freqs(1e6f, head_dim).data(), 1.0f);
    const int half = head_dim / 2;
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          const size_t lo = (size_t(r) * heads + h) * head_dim + i, hi = lo + half;
          // Both use the same f32 angle; cos/sin in f32 are within 1 ulp, then 2 products and 1 add: error
          // <= 4 u (|a| + |b|); 8 u for slack.
          const double tol = 8 * kU32 * (std::abs(x[lo]) + std::abs(x[hi]));
          ASSERT_NEAR(fast[lo], ref[lo], tol);
          ASSERT_NEAR(fast[hi], ref[hi], tol);
        }
    // Position 0 is the identity.
    for (int i = 0; i < heads * head_dim; ++i) ASSERT_EQ(fast[i], x[i]);
  }
  // The definition itself, independent of both implementations: head_dim 4, theta 10000, position 1:
  // inv_freq = {1, 10000^-0.5 = 0.01}; pair (0, 2) rotates by 1 rad, pair (1, 3) by 0.01 rad.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const int32_t p1 = 1;
  rope(x.data(), &p1, 1, 1, 4, freqs(10000.0f, 4).data(), 1.0f);
  EXPECT_NEAR(x[0], 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(0.01) + 2 * std::sin(0.01), 1e-6);
  EXPECT_THROW(rope(x.data(), &p1, 1, 1, 3, freqs(10000.0f, 3).data(), 1.0f), Error);
}

TEST_P(Ops, SwigluMatchesReference) {
  for (int64_t n : {1, 13, 16, 33, 3072, 100001}) {
    auto g = random_normal(n, 4.0f, n), u = random_normal(n, 1.0f, n + 1);
    // A very negative gate: silu(-90) = -90 / (1 + e^90) = -7.4e-38, a normal float. In f32, e^90 overflows to
    // inf, so a kernel computing g / (1 + exp(-g)) in f32 (the SIMD variants) gets -0, while the reference (and
    // the scalar variant, which is the reference) computes in double and keeps -7.4e-38 * up. Neither is wrong:
    // the true value is below 1e-36 in magnitude, and all that matters downstream (a projection with weights
    // ~0.01-1 added to a residual of size ~1) is that the output is tiny and not NaN. So the check is an
    // absolute bound of 1e-35 around the reference there, not an exact 0 that only the overflow path gives.
    g[0] = -90.0f;
    std::vector<float> fast(n), ref(n);
    swiglu(g.data(), u.data(), fast.data(), n);
    ref::swiglu(g.data(), u.data(), ref.data(), n);
    // exp ~2 ulp, then add, divide, multiply: <= 6 u relative; 16 u for slack (plus 1e-35 absolute for the
    // overflowed case above).
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(fast[i], ref[i], 16 * kU32 * std::abs(ref[i]) + 1e-35) << n << " " << i;
    EXPECT_LE(std::abs(fast[0]), 1e-36f);
    EXPECT_FALSE(std::isnan(fast[0]));
    // NaN in, NaN out (the exp clamp must not swallow it).
    const float nan_gate = NAN, one = 1.0f;
    float nan_out = 0;
    swiglu(&nan_gate, &one, &nan_out, 1);
    EXPECT_TRUE(std::isnan(nan_out));
  }
}

// swiglu_rows gives each row the bits swiglu gives it alone (so its reference is swiglu's), for ragged widths and
// row counts on both sides of the size where threads split the rows (2 threads here).
TEST_P(Ops, SwigluRowsEqualSwigluOfEachRow) {
  const int saved = num_threads();
  set_num_threads(2);
  for (int inter : {1, 13, 16, 100, 1536}) {
    for (int rows : {1, 3, 17, 40}) {
      const auto gate_up = random_normal(int64_t(rows) * 2 * inter, 4.0f, uint32_t(rows * 7 + inter));
      std::vector<float> got(size_t(rows) * inter, -1.0f), want(got.size(), -2.0f);
      swiglu_rows(gate_up.data(), rows, inter, got.data());
      for (int r = 0; r < rows; ++r) {
        const float* gate = gate_up.data() + size_t(r) * 2 * inter;
        swiglu(gate, gate + inter, want.data() + size_t(r) * inter, inter);
      }
      EXPECT_EQ(bit_differences(got.data(), want.data(), got.size()), 0u) << rows << " x " << inter;
    }
  }
  set_num_threads(saved);
}

TEST_P(Ops, SoftmaxMatchesReference) {
  for (int n : {1, 5, 16, 17, 1000, 151936}) {
    auto x = random_normal(n, 3.0f, n);
    if (n > 3) x[2] = -INFINITY;  // a masked logit gets exactly 0
    auto fast = x, ref = x;
    softmax(fast.data(), n);
    ref::softmax(ref.data(), n);
    const float max_x = *std::max_element(x.begin(), x.end());
    double total = 0, total_tol = 0;
    for (int i = 0; i < n; ++i) {
      // x - max rounds with error |x - max| u, which exp turns into that relative error; exp ~2 u; the sum
      // (4 accumulators of W lanes: n/(4W)-long chains + reduction) <= (n/(4W) + 6) u relative; the final
      // product 1 u. Factor 2 for slack.
      const double rel = 2.0 * ((std::isinf(x[i]) ? 0.0 : std::abs(x[i] - max_x)) + n / (4 * lanes()) + 9.0) * kU32;
      ASSERT_NEAR(fast[i], ref[i], rel * ref[i] + 1e-37) << n << " " << i;
      total += fast[i];
      total_tol += rel * ref[i] + 1e-37;
    }
    if (n > 3) {
      EXPECT_EQ(fast[2], 0.0f);
    }
    EXPECT_NEAR(total, 1.0, total_tol + n * 1e-16);  // the per-element bounds, summed (plus the double sum's own)
  }
}

// A row's (or element's) result must not depend on the batch around it: compute each row alone and compare bits.
TEST_P(Ops, RowwiseOpsAreBatchInvariant) {
  const int rows = 37, dim = 1000, heads = 4, head_dim = 250;  // odd sizes exercise the masked tails
  auto x = random_normal(size_t(rows) * dim, 2.0f, 5), w = random_normal(dim, 1.0f, 6);
  auto u = random_normal(size_t(rows) * dim, 1.0f, 7);
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = 3 * r + 1;
  std::vector<float> norm_all(x.size()), swi_all(x.size()), rope_all = x;
  rmsnorm(x.data(), w.data(), norm_all.data(), rows, dim, 1e-6f);
  swiglu(x.data(), u.data(), swi_all.data(), int64_t(rows) * dim);
  rope(rope_all.data(), pos.data(), rows, heads, head_dim, freqs(1e6f, head_dim).data(), 1.0f);
  for (int r = 0; r < rows; ++r) {
    const size_t off = size_t(r) * dim;
    std::vector<float> one(dim), swi(dim), rot(x.begin() + off, x.begin() + off + dim);
    rmsnorm(x.data() + off, w.data(), one.data(), 1, dim, 1e-6f);
    swiglu(x.data() + off, u.data() + off, swi.data(), dim);
    rope(rot.data(), &pos[r], 1, heads, head_dim, freqs(1e6f, head_dim).data(), 1.0f);
    ASSERT_EQ(bit_differences(one.data(), norm_all.data() + off, dim), 0u) << r;
    ASSERT_EQ(bit_differences(swi.data(), swi_all.data() + off, dim), 0u) << r;
    ASSERT_EQ(bit_differences(rot.data(), rope_all.data() + off, dim), 0u) << r;
  }
}

TEST_P(Ops, EmbedRowsConvertsEachDtype) {
  const int vocab = 11, dim = 19;
  auto table = random_normal(size_t(vocab) * dim, 1.0f, 9);
  std::vector<uint16_t> bf16(table.size()), f16(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    bf16[i] = f32_to_bf16(table[i]);
    f16[i] = f32_to_f16(table[i]);
  }
  const std::vector<int32_t> ids = {3, 0, 10, 3};
  std::vector<float> out(ids.size() * dim);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const void* data = t == DType::F32 ? static_cast<const void*>(table.data())
                                       : t == DType::BF16 ? static_cast<const void*>(bf16.data()) : f16.data();
    embed_rows(data, t, vocab, dim, ids.data(), int(ids.size()), out.data());
    for (size_t r = 0; r < ids.size(); ++r)
      for (int i = 0; i < dim; ++i) {
        const size_t src = size_t(ids[r]) * dim + i;
        const float want = t == DType::F32 ? table[src] : t == DType::BF16 ? bf16_to_f32(bf16[src]) : f16_to_f32(f16[src]);
        ASSERT_EQ(out[r * dim + i], want);
      }
  }
  const int32_t bad[] = {11};
  EXPECT_THROW(embed_rows(table.data(), DType::F32, vocab, dim, bad, 1, out.data()), Error);
  const int32_t negative[] = {-1};
  EXPECT_THROW(embed_rows(table.data(), DType::F32, vocab, dim, negative, 1, out.data()), Error);
  EXPECT_THROW(embed_rows(table.data(), DType::I32, vocab, dim, ids.data(), 1, out.data()), Error);
}

}  // namespace
}  // namespace ts::kernels
