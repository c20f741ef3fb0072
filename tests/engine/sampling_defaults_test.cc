// generation_config.json supplies default sampling values; explicit values override them; each value says
// where it came from. And the bundle's stop ids merge generation_config.json's eos list.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/model_bundle.h"
#include "engine/sampling_defaults.h"
#include "model/random_checkpoint.h"
#include "model/model_test_util.h"

namespace ts {
namespace {

GenerationConfig qwen3_generation_config() {
  return parse_generation_config(R"({"do_sample": true, "eos_token_id": [151645, 151643], "temperature": 0.6,
    "top_k": 20, "top_p": 0.95})", "generation_config.json");
}

TEST(SamplingDefaults, FileSuppliesDefaults) {
  const SamplingChoice c = choose_sampling({}, qwen3_generation_config());
  EXPECT_FLOAT_EQ(c.params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(c.params.top_p, 0.95f);
  EXPECT_EQ(c.params.top_k, 20);
  EXPECT_EQ(c.params.min_p, 0.0f);
  EXPECT_EQ(c.temperature_source, "generation_config.json");
  EXPECT_EQ(c.top_k_source, "generation_config.json");
  EXPECT_EQ(c.min_p_source, "default");
}

TEST(SamplingDefaults, ExplicitValuesOverride) {
  SamplingOverrides o;
  o.temperature = 0.0f;  // explicit greedy beats the file's 0.6
  o.top_k = 0;
  const SamplingChoice c = choose_sampling(o, qwen3_generation_config());
  EXPECT_EQ(c.params.temperature, 0.0f);
  EXPECT_EQ(c.params.top_k, 0);
  EXPECT_FLOAT_EQ(c.params.top_p, 0.95f);
  EXPECT_EQ(c.temperature_source, "flag");
  EXPECT_EQ(c.top_k_source, "flag");
  EXPECT_EQ(c.top_p_source, "generation_config.json");
}

TEST(SamplingDefaults, NoFileMeansEngineDefaults) {
  const SamplingChoice c = choose_sampling({}, GenerationConfig{});
  EXPECT_EQ(c.params.temperature, 0.0f);
  EXPECT_EQ(c.params.top_p, 1.0f);
  EXPECT_EQ(c.params.top_k, 0);
  EXPECT_EQ(c.temperature_source, "default");
  EXPECT_EQ(c.top_p_source, "default");
}

TEST(SamplingDefaults, DoSampleFalseIsGreedyUnlessAFlagSaysOtherwise) {
  GenerationConfig g = parse_generation_config(R"({"do_sample": false, "temperature": 0.7})", "g.json");
  SamplingChoice c = choose_sampling({}, g);
  EXPECT_EQ(c.params.temperature, 0.0f);
  EXPECT_EQ(c.temperature_source, "generation_config.json (do_sample=false)");
  SamplingOverrides o;
  o.temperature = 0.9f;
  c = choose_sampling(o, g);
  EXPECT_FLOAT_EQ(c.params.temperature, 0.9f);
  EXPECT_EQ(c.temperature_source, "flag");
}

TEST(SamplingDefaults, OutOfRangeFlagIsAnError) {
  SamplingOverrides o;
  o.top_p = 1.5f;
  EXPECT_THROW(choose_sampling(o, GenerationConfig{}), Error);
  SamplingOverrides r;
  r.repetition_penalty = 0.0f;
  EXPECT_THROW(choose_sampling(r, GenerationConfig{}), Error);
}

// Qwen2.5-Instruct's file sets repetition_penalty 1.05: a default like the others (vLLM applies it too).
TEST(SamplingDefaults, RepetitionPenaltyComesFromTheFileUnlessGiven) {
  const GenerationConfig g = parse_generation_config(
      R"({"do_sample": true, "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8})", "g.json");
  SamplingChoice c = choose_sampling({}, g);
  EXPECT_FLOAT_EQ(c.repetition_penalty, 1.05f);
  EXPECT_EQ(c.repetition_penalty_source, "generation_config.json");
  SamplingOverrides o;
  o.repetition_penalty = 1.0f;
  c = choose_sampling(o, g);
  EXPECT_EQ(c.repetition_penalty, 1.0f);
  EXPECT_EQ(c.repetition_penalty_source, "flag");
  c = choose_sampling({}, qwen3_generation_config());
  EXPECT_EQ(c.repetition_penalty, 1.0f);
  EXPECT_EQ(c.repetition_penalty_source, "default");
}

TEST(ModelBundleStopIds, MergesGenerationConfigEos) {
  const std::string dir = testing::temp_dir("bundle_eos");
  ModelConfig c = tiny_qwen3_config(64, 32, 1);
  c.eos_token_ids = {5};
  write_random_model(dir, c, DType::F32, 3);
  EXPECT_EQ(ModelBundle::load(dir, "").stop_ids(), (std::vector<int32_t>{5}));
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [7, 5], "temperature": 0.6})";
  const ModelBundle b = ModelBundle::load(dir, "");
  EXPECT_TRUE(b.generation_config.present);
  EXPECT_EQ(b.stop_ids(), (std::vector<int32_t>{5, 7}));
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": "7"})";
  EXPECT_THROW(ModelBundle::load(dir, ""), Error);
}

}  // namespace
}  // namespace ts
