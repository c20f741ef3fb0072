// Drafter base logits U and Markov conditionals against the independent PyTorch reference
// (tools/py/reference_drafter.py), from random target hidden states given in the fixture. Tolerances as in
// golden_test.cc: 1e-4 for f32 weights, 3e-2 for bf16 (activations rounded to bf16 before each product).
// Also: extending the context in several pieces gives the same U as extending it at once (the context K/V are
// cached per layer and never recomputed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/drafter.h"
#include "model_test_util.h"

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

// The drafter is paired with a target; the fixture names the shape that pairing needs.
ModelConfig fixture_target(const nlohmann::json& golden) {
  ModelConfig target;
  target.hidden_size = golden["target_hidden_size"].get<int>();
  target.num_layers = golden["target_num_layers"].get<int>();
  target.vocab_size = golden["vocab_size"].get<int>();
  return target;
}

// U for the fixture's inputs (context at positions 0..n_ctx-1, block from n_ctx).
std::vector<float> block_logits(Drafter& drafter, const nlohmann::json& golden) {
  const int n_ctx = golden["n_ctx"].get<int>(), W = drafter.tap_width();
  std::vector<float> taps;  // [n_ctx, W]
  for (const auto& row : golden["target_hidden"])
    for (const auto& v : row) taps.push_back(v.get<float>());
  EXPECT_EQ(taps.size(), size_t(n_ctx) * W);
  std::vector<int32_t> positions(n_ctx);
  for (int i = 0; i < n_ctx; ++i) positions[i] = i;
  DrafterState state = drafter.new_state(64);
  drafter.extend_context(state, taps.data(), positions.data(), n_ctx);
  std::vector<float> u(size_t(drafter.block_size()) * drafter.vocab_size());  // [B, V]
  drafter.draft_block(state, golden["anchor"].get<int32_t>(), n_ctx, u.data());
  return u;
}

std::vector<double> golden_u(const nlohmann::json& golden) {
  std::vector<double> want_u;
  for (const auto& row : golden["U"])
    for (const auto& v : row) want_u.push_back(v.get<double>());
  return want_u;
}

class DrafterGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DrafterGolden, BaseLogitsAndConditionalsMatchReference) {
  const std::string dir = std::string(TS_TEST_DATA) + "/golden/" + GetParam();
  auto golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  auto drafter = Drafter::load(dir, fixture_target(golden));
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

INSTANTIATE_TEST_SUITE_P(Cases, DrafterGolden,
                         ::testing::Values("drafter_b4_r8", "drafter_b7_r16", "drafter_v5_b5_r8", "drafter_nomarkov_b4"));

// The published layout: rope_parameters (rope_theta 1e6, no top-level rope_theta), no target_hidden_size, a
// drafter narrower than its target.
TEST(DrafterGoldenLayout, TransformersV5DrafterReadsItsRopeBaseAndTapWidth) {
  const std::string dir = std::string(TS_TEST_DATA) + "/golden/drafter_v5_b5_r8";
  auto config = nlohmann::json::parse(read_text_file(dir + "/config.json"));
  ASSERT_FALSE(config.contains("rope_theta"));
  ASSERT_FALSE(config.contains("target_hidden_size"));
  auto golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  auto drafter = Drafter::load(dir, fixture_target(golden));
  EXPECT_EQ(drafter->config().rope.theta, 1e6);
  EXPECT_NE(drafter->config().hidden_size, drafter->config().target_hidden_size);
  EXPECT_EQ(drafter->tap_width(), 2 * golden["target_hidden_size"].get<int>());
  EXPECT_TRUE(drafter->has_markov_head());
}

// Negative control: the same drafter with the old silent default base (10000) misses the reference's U by far more
// than the tolerance, so the case above checks that the base is read.
TEST(DrafterGoldenLayout, WrongRopeBaseFails) {
  const std::string src = std::string(TS_TEST_DATA) + "/golden/drafter_v5_b5_r8";
  auto golden = nlohmann::json::parse(read_text_file(src + "/golden.json"));
  auto config = nlohmann::json::parse(read_text_file(src + "/config.json"));
  config["rope_parameters"]["rope_theta"] = 10000.0;
  const std::string dir = testing::temp_dir("drafter_theta");
  std::filesystem::copy_file(src + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << config.dump();
  auto right = Drafter::load(src, fixture_target(golden));
  auto wrong = Drafter::load(dir, fixture_target(golden));
  const double right_err = rel_error(block_logits(*right, golden).data(), golden_u(golden));
  const double wrong_err = rel_error(block_logits(*wrong, golden).data(), golden_u(golden));
  std::printf("drafter_v5_b5_r8: U error %.2e with rope_theta 1e6, %.2e with 1e4\n", right_err, wrong_err);
  EXPECT_LT(right_err, 1e-4);
  EXPECT_GT(wrong_err, 1e-2);
  std::filesystem::remove_all(dir);
}

TEST(DrafterGoldenLayout, WithoutMarkovHeadConditionalsAreTheBaseRows) {
  const std::string dir = std::string(TS_TEST_DATA) + "/golden/drafter_nomarkov_b4";
  auto golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  auto drafter = Drafter::load(dir, fixture_target(golden));
  EXPECT_FALSE(drafter->has_markov_head());
  std::vector<float> row(drafter->vocab_size(), 0.5f), before = row;
  drafter->add_markov_bias(3, row.data());
  EXPECT_EQ(row, before);
}

}  // namespace
}  // namespace ts
