// Golden logits and hidden states against the independent PyTorch reference (tools/py/reference_model.py,
// float64 arithmetic) on random-weight checkpoints committed under tests/data/golden/.
//
// Tolerance, as max |ours - ref| / max |ref| over a tensor:
//  - F32 weights: 1e-4. We compute in f32 (about 6e-8 relative per operation); over a few layers of sums of
//    ~100 terms the error stays below 1e-5 of the tensor's scale, so 1e-4 leaves margin and still catches any
//    real mistake (a wrong RoPE pair, a missing norm, a swapped head) which moves values by O(1).
//  - BF16 weights: 3e-2. The reference uses the same bf16 weights but f64 activations; we round activations
//    to bf16 (8 significant bits, relative error <= 2^-9) before every product, as bf16 engines do. That is
//    ~0.2% per product input, growing to ~1% through the layers; 3e-2 is a few times that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/target_model.h"
#include "model_test_util.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(want[i]));
  }
  return max_err / std::max(max_ref, 1e-30);
}

std::vector<std::string> golden_cases() {
  std::vector<std::string> cases;
  const fs::path root = fs::path(TS_TEST_DATA) / "golden";
  if (!fs::exists(root)) return cases;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "golden.json") && !fs::exists(e.path() / "drafter_golden.json") &&
        e.path().filename().string().rfind("drafter", 0) != 0)
      cases.push_back(e.path().filename().string());
  std::sort(cases.begin(), cases.end());
  return cases;
}

// The fixture's RoPE positions (scaled-RoPE cases spread them past original_max_position_embeddings), else 0..n-1.
std::vector<int32_t> golden_positions(const nlohmann::json& golden, int n) {
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  if (golden.contains("positions")) positions = golden["positions"].get<std::vector<int32_t>>();
  EXPECT_EQ(int(positions.size()), n);
  return positions;
}

// Max relative logit error of the model in `dir` against the fixture's logits.
double logit_error(const std::string& dir, const nlohmann::json& golden) {
  auto model = TargetModel::load(dir);
  const auto ids = golden["input_ids"].get<std::vector<int32_t>>();
  ForwardBatch b;
  b.tokens = ids;
  b.positions = golden_positions(golden, int(ids.size()));
  for (int i = 0; i < int(ids.size()); ++i) b.logit_rows.push_back(i);
  KVCache cache = model->new_cache(int(ids.size()));
  ForwardResult r;
  model->forward(b, {&cache}, &r);
  std::vector<double> want;
  for (const auto& row : golden["logits"])
    for (const auto& v : row) want.push_back(v.get<double>());
  return rel_error(r.logits, want);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, LogitsAndHiddenStatesMatchReference) {
  const std::string dir = std::string(TS_TEST_DATA) + "/golden/" + GetParam();
  auto golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  auto model = TargetModel::load(dir);
  const auto ids = golden["input_ids"].get<std::vector<int32_t>>();
  const int n = int(ids.size()), V = model->config().vocab_size, H = model->config().hidden_size;
  const bool bf16 = golden.value("weights_dtype", std::string("F32")) == "BF16";
  const double tol = bf16 ? 3e-2 : 1e-4;

  ForwardBatch b;
  b.tokens = ids;
  for (int i = 0; i < n; ++i) b.logit_rows.push_back(i);
  b.positions = golden_positions(golden, n);
  b.hidden_layers = golden["hidden_layers"].get<std::vector<int32_t>>();
  KVCache cache = model->new_cache(n);
  ForwardResult r;
  model->forward(b, {&cache}, &r);

  std::vector<double> want_logits;
  for (const auto& row : golden["logits"])
    for (const auto& v : row) want_logits.push_back(v.get<double>());
  ASSERT_EQ(want_logits.size(), size_t(n) * V);
  const double logit_err = rel_error(r.logits, want_logits);
  EXPECT_LT(logit_err, tol) << GetParam() << " logits";
  std::printf("%s: logits max relative error %.2e (tolerance %.0e)\n", GetParam().c_str(), logit_err, tol);

  for (size_t li = 0; li < b.hidden_layers.size(); ++li) {
    std::vector<double> want;
    for (const auto& row : golden["hidden"][li])
      for (const auto& v : row) want.push_back(v.get<double>());
    ASSERT_EQ(want.size(), size_t(n) * H);
    std::vector<float> got(r.hidden.begin() + li * size_t(n) * H, r.hidden.begin() + (li + 1) * size_t(n) * H);
    EXPECT_LT(rel_error(got, want), tol) << GetParam() << " hidden of layer " << b.hidden_layers[li];
  }
  // Greedy predictions must agree wherever the reference's top-2 margin is clear of the tolerance.
  for (int i = 0; i < n; ++i) {
    const double* w = &want_logits[size_t(i) * V];
    int best = int(std::max_element(w, w + V) - w);
    double second = -1e300;
    for (int v = 0; v < V; ++v)
      if (v != best) second = std::max(second, w[v]);
    const float* g = &r.logits[size_t(i) * V];
    if (w[best] - second > 0.1 * std::fabs(w[best]) + 0.1) {
      EXPECT_EQ(int(std::max_element(g, g + V) - g), best);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTest);

// Negative control: each scaled-RoPE fixture, loaded with its scaling removed (plain RoPE of the same base), misses
// the reference by far more than the tolerance. So the cases above pass only because the scaling is computed.
TEST(Golden, IgnoringRopeScalingFailsTheScaledCases) {
  for (const std::string name : {"llama31_llama3_f32", "qwen25_yarn_f32", "qwen3_v5_linear_f32"}) {
    const std::string src = std::string(TS_TEST_DATA) + "/golden/" + name;
    auto golden = nlohmann::json::parse(read_text_file(src + "/golden.json"));
    auto config = nlohmann::json::parse(read_text_file(src + "/config.json"));
    ASSERT_TRUE(config.contains("rope_scaling") || config.contains("rope_parameters")) << name;
    if (config.contains("rope_parameters")) {
      config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", config["rope_parameters"]["rope_theta"]}};
    } else {
      config["rope_scaling"] = nullptr;
    }
    const std::string dir = testing::temp_dir("unscaled");
    for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
    std::ofstream(dir + "/config.json") << config.dump();
    const double scaled = logit_error(src, golden), unscaled = logit_error(dir, golden);
    std::printf("%s: logits error %.2e with its RoPE scaling, %.2e without\n", name.c_str(), scaled, unscaled);
    EXPECT_LT(scaled, 1e-4) << name;
    EXPECT_GT(unscaled, 1e-2) << name << ": the fixture does not exercise its RoPE scaling";
    fs::remove_all(dir);
  }
}

// The drafter's RoPE base matters too: the transformers v5 fixture (rope_parameters.rope_theta 1e6) read with the
// old default base 10000 misses its base logits (checked in drafter_golden_test.cc, DrafterGolden.WrongRopeBaseFails).

TEST(Golden, FixturesArePresent) {
  // The golden fixtures are committed; an empty list would make the suite above vacuous.
  EXPECT_GE(golden_cases().size(), 10u);
}

}  // namespace
}  // namespace ts
