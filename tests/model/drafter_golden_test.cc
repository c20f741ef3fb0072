// Drafter base logits U and Markov conditionals against the independent PyTorch reference
// (tools/py/reference_drafter.py), from random target hidden states given in the fixture. Tolerances as in
// golden_test.cc: 1e-4 for f32 weights, 3e-2 for bf16 (activations rounded to bf16 before each product).
// Also: extending the context in several pieces gives the same U as extending it at once (the context K/V are
// cached per layer and never recomputed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/drafter.h"

namespace ts {
namespace {

double rel_error(const float* got, const std::vector<double>& want) {
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(want[i]));
  }
  return max_err / std::max(max_ref, 1e-30);
}

class DrafterGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DrafterGolden, BaseLogitsAndConditionalsMatchReference) {
  const std::string dir = std::string(TS_TEST_DATA) + "/golden/" + GetParam();
  auto golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  auto drafter = Drafter::load(dir);
  const int B = drafter->block_size(), V = drafter->vocab_size(), W = drafter->tap_width();
  const double tol = golden.value("weights_dtype", std::string("F32")) == "BF16" ? 3e-2 : 1e-4;
  const int n_ctx = golden["n_ctx"].get<int>();
  const int32_t anchor = golden["anchor"].get<int32_t>();
  std::vector<float> taps;  // [n_ctx, W]
  for (const auto& row : golden["target_hidden"])
    for (const auto& v : row) taps.push_back(v.get<float>());
  ASSERT_EQ(taps.size(), size_t(n_ctx) * W);
  std::vector<int32_t> positions(n_ctx);
  for (int i = 0; i < n_ctx; ++i) positions[i] = i;

  std::vector<double> want_u;
  for (const auto& row : golden["U"])
    for (const auto& v : row) want_u.push_back(v.get<double>());
  ASSERT_EQ(want_u.size(), size_t(B) * V);

  // All context at once.
  DrafterState state = drafter->new_state(64);
  drafter->extend_context(state, taps.data(), positions.data(), n_ctx);
  std::vector<float> u(size_t(B) * V);  // [B, V]
  drafter->draft_block(state, anchor, n_ctx, u.data());
  const double u_err = rel_error(u.data(), want_u);
  EXPECT_LT(u_err, tol);
  std::printf("%s: U max relative error %.2e (tolerance %.0e)\n", GetParam().c_str(), u_err, tol);

  for (const auto& c : golden["conditionals"]) {
    const int depth = c["depth"].get<int>();
    const int32_t parent = c["parent"].get<int32_t>();
    std::vector<float> logits(u.begin() + size_t(depth - 1) * V, u.begin() + size_t(depth) * V);
    drafter->add_markov_bias(parent, logits.data());
    EXPECT_LT(rel_error(logits.data(), c["logits"].get<std::vector<double>>()), tol)
        << "depth " << depth << " parent " << parent;
  }

  // The context in two pieces (as rounds extend it) gives the same block logits, bit for bit.
  DrafterState pieces = drafter->new_state(64);
  const int split = n_ctx / 2;
  drafter->extend_context(pieces, taps.data(), positions.data(), split);
  drafter->extend_context(pieces, taps.data() + size_t(split) * W, positions.data() + split, n_ctx - split);
  std::vector<float> u2(size_t(B) * V);
  drafter->draft_block(pieces, anchor, n_ctx, u2.data());
  for (size_t i = 0; i < u.size(); ++i) ASSERT_EQ(u[i], u2[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Cases, DrafterGolden, ::testing::Values("drafter_b4_r8", "drafter_b7_r16"));

}  // namespace
}  // namespace ts
