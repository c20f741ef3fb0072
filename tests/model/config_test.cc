// config.json and generation_config.json parsing: both RoPE spellings, every supported RoPE type with its
// frequency table (model/rope.h) against values computed by hand from Hugging Face's formulas, and clear errors for
// unsupported or malformed input. The forward passes with these tables are checked in golden_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/rope.h"

namespace ts {
namespace {

using nlohmann::json;

void expect_error(const std::function<void()>& fn, const std::string& phrase) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << phrase << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

json base_config() {
  return json{{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 64},         {"hidden_size", 32},
              {"intermediate_size", 64},               {"num_hidden_layers", 1},   {"num_attention_heads", 2},
              {"num_key_value_heads", 1},              {"head_dim", 16},           {"max_position_embeddings", 4096},
              {"rope_theta", 500000.0}};
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "m/config.json"); }

TEST(RopeConfig, LegacyAndV5SpellingsGiveTheSameConfig) {
  json legacy = base_config();
  legacy["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 256}};
  json v5 = base_config();
  v5.erase("rope_theta");
  v5["rope_parameters"] = legacy["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  for (const json& j : {legacy, v5}) {
    const RopeConfig r = parse(j).rope;
    EXPECT_EQ(r.type, RopeType::Llama3);
    EXPECT_EQ(r.theta, 500000.0);
    EXPECT_EQ(r.factor, 8.0);
    EXPECT_EQ(r.original_max_position_embeddings, 256);
  }
  json old_key = base_config();  // Qwen2.5 writes "type", not "rope_type"
  old_key["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse(old_key).rope.type, RopeType::Linear);
  json null_scaling = base_config();
  null_scaling["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(null_scaling).rope.type, RopeType::Default);
}

TEST(RopeConfig, Errors) {
  json j = base_config();
  j.erase("rope_theta");
  expect_error([&] { parse(j); }, "missing RoPE base");
  j["rope_theta"] = "1e4";
  expect_error([&] { parse(j); }, "'rope_theta' must be a number");
  j["rope_theta"] = -1.0;
  expect_error([&] { parse(j); }, "must be positive");
  j = base_config();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};  // top-level says 500000
  expect_error([&] { parse(j); }, "disagrees with 'rope_parameters.rope_theta'");
  j = base_config();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error([&] { parse(j); }, "unsupported RoPE type 'dynamic'");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error([&] { parse(j); }, "'rope_scaling.low_freq_factor' is required");
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", "2"}};
  expect_error([&] { parse(j); }, "'rope_scaling.factor' must be a number");
  j["rope_scaling"] = {{"rope_type", "linear"}};
  expect_error([&] { parse(j); }, "'rope_scaling.factor' is required");
  j["rope_scaling"] = {{"rope_type", 3}};
  expect_error([&] { parse(j); }, "'rope_scaling.rope_type' must be a string");
  j["rope_scaling"] = "linear";
  expect_error([&] { parse(j); }, "'rope_scaling' must be an object");
  j = base_config();
  j["partial_rotary_factor"] = 0.5;
  expect_error([&] { parse(j); }, "partial_rotary_factor");
}

double default_inv_freq(double theta, int i, int head_dim) { return std::pow(theta, -2.0 * i / head_dim); }

TEST(RopeTable, DefaultAndLinear) {
  RopeConfig r;
  r.theta = 10000.0;
  RopeTable t = rope_table(r, 16);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(t.inv_freq[i], default_inv_freq(1e4, i, 16), 1e-6 * t.inv_freq[i]);
  EXPECT_EQ(t.attention_scale, 1.0f);
  r.type = RopeType::Linear;
  r.factor = 4.0;
  t = rope_table(r, 16);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(t.inv_freq[i], default_inv_freq(1e4, i, 16) / 4, 1e-6 * t.inv_freq[i]);
}

TEST(RopeTable, Llama3Bands) {
  // theta 500000, head_dim 16, original 256: wavelengths 2 pi / f_i are 6.3, 32, 167, 860, ...; high band < 64
  // kept, low band > 256 divided by 8, 167 in between blended with smooth = (256 / 167 - 1) / 3.
  RopeConfig r;
  r.type = RopeType::Llama3;
  r.theta = 500000.0;
  r.factor = 8.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 256;
  const RopeTable t = rope_table(r, 16);
  for (int i = 0; i < 8; ++i) {
    const double f = default_inv_freq(5e5, i, 16), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 256) {
      want = f / 8;
    } else if (wavelen >= 64) {
      const double smooth = (256 / wavelen - 1) / 3;
      want = (1 - smooth) * f / 8 + smooth * f;
      EXPECT_EQ(i, 2);
    }
    EXPECT_NEAR(t.inv_freq[i], want, 1e-6 * want) << i;
  }
  EXPECT_NEAR(t.inv_freq[0], 1.0, 1e-7);   // kept
  EXPECT_NEAR(t.inv_freq[7], default_inv_freq(5e5, 7, 16) / 8, 1e-12);
}

TEST(RopeTable, YarnRampAndAttentionFactor) {
  // Qwen2.5's recipe: {"factor": 4, "original_max_position_embeddings": 256, "type": "yarn"}, theta 1e6,
  // head_dim 16. Correction range: 16 ln(256 / (32 * 2 pi)) / (2 ln 1e6) = 0.14 -> 0 and
  // 16 ln(256 / (2 pi)) / (2 ln 1e6) = 2.15 -> 3, so pair i has ramp min(i / 3, 1).
  json j = base_config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["rope_theta"] = 1e6;
  j["max_position_embeddings"] = 1024;
  j["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 256}, {"type", "yarn"}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  const RopeTable t = rope_table(c.rope, 16);
  for (int i = 0; i < 8; ++i) {
    const double f = default_inv_freq(1e6, i, 16), ramp = std::min(i / 3.0, 1.0);
    const double want = f / 4 * ramp + f * (1 - ramp);
    EXPECT_NEAR(t.inv_freq[i], want, 1e-6 * want) << i;
  }
  EXPECT_NEAR(t.attention_scale, 0.1 * std::log(4.0) + 1, 1e-6);
  // attention_factor given: used as is; mscale / mscale_all_dim: their ratio.
  RopeConfig r = c.rope;
  r.attention_factor = 1.5;
  EXPECT_FLOAT_EQ(rope_table(r, 16).attention_scale, 1.5f);
  r.attention_factor = 0;
  r.mscale = 1.0;
  r.mscale_all_dim = 0.5;
  EXPECT_NEAR(rope_table(r, 16).attention_scale, (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 1024);  // 256 x 4
  // Qwen2.5 as published: max_position_embeddings 32768, yarn factor 4 over 32768 -> usable to 131072.
  json q = j;
  q["max_position_embeddings"] = 32768;
  q["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"type", "yarn"}};
  EXPECT_EQ(parse(q).max_position_embeddings, 131072);
  EXPECT_EQ(parse(q).rope.factor, 4.0);
  // Without factor: max_position_embeddings / original (transformers v5).
  j["rope_scaling"].erase("factor");
  EXPECT_EQ(parse(j).rope.factor, 4.0);
  // Without original: max_position_embeddings.
  j["rope_scaling"] = {{"factor", 2.0}, {"rope_type", "yarn"}};
  EXPECT_EQ(parse(j).rope.original_max_position_embeddings, 1024);
  j["rope_scaling"]["truncate"] = "no";
  expect_error([&] { parse(j); }, "'rope_scaling.truncate' must be true or false");
}

// ---------------------------------------------------------------- generation_config.json

GenerationConfig parse_gen(const std::string& text) { return parse_generation_config(text, "m/generation_config.json"); }

TEST(GenerationConfig, ReadsSamplingDefaultsAndEos) {
  // Qwen3's published file.
  GenerationConfig g = parse_gen(R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
    "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
  EXPECT_TRUE(g.present);
  EXPECT_EQ(g.do_sample, true);
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{151645, 151643}));
  EXPECT_TRUE(g.unsupported.empty());
  EXPECT_FALSE(g.repetition_penalty.has_value());
  EXPECT_FALSE(g.max_new_tokens.has_value());
  // Qwen2.5-Instruct's file also sets a repetition penalty (applied, as vLLM does); a typical_p other than 1 is not
  // implemented: listed.
  g = parse_gen(R"({"do_sample": true, "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
    "typical_p": 1.0, "max_new_tokens": 2048})");
  EXPECT_FLOAT_EQ(*g.repetition_penalty, 1.05f);
  EXPECT_EQ(*g.max_new_tokens, 2048);
  EXPECT_TRUE(g.unsupported.empty());
  g = parse_gen(R"({"typical_p": 0.9, "no_repeat_ngram_size": 3})");
  EXPECT_EQ(g.unsupported, (std::vector<std::string>{"typical_p", "no_repeat_ngram_size"}));
  g = parse_gen(R"({"eos_token_id": 2, "min_p": 0.05, "temperature": null})");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_FLOAT_EQ(*g.min_p, 0.05f);
  EXPECT_FALSE(g.temperature.has_value());
  EXPECT_FALSE(g.do_sample.has_value());
  EXPECT_FALSE(load_generation_config("/nonexistent/folder").present);
}

TEST(GenerationConfig, WrongTypesAndRangesAreClearErrors) {
  expect_error([] { parse_gen(R"({"temperature": "0.6"})"); }, "'temperature' must be a number");
  expect_error([] { parse_gen(R"({"temperature": -1})"); }, "'temperature' = -1 is outside");
  expect_error([] { parse_gen(R"({"top_p": 0})"); }, "'top_p' = 0 is outside (0, 1]");
  expect_error([] { parse_gen(R"({"top_p": 1.5})"); }, "'top_p' = 1.5 is outside");
  expect_error([] { parse_gen(R"({"min_p": 2})"); }, "'min_p' = 2 is outside");
  expect_error([] { parse_gen(R"({"top_k": 2.5})"); }, "'top_k' must be a non-negative integer");
  expect_error([] { parse_gen(R"({"top_k": -1})"); }, "'top_k' must be a non-negative integer");
  expect_error([] { parse_gen(R"({"do_sample": "yes"})"); }, "'do_sample' must be true or false");
  expect_error([] { parse_gen(R"({"repetition_penalty": 0})"); }, "'repetition_penalty' = 0 is outside (0, 10]");
  expect_error([] { parse_gen(R"({"repetition_penalty": 11})"); }, "'repetition_penalty' = 11 is outside");
  expect_error([] { parse_gen(R"({"max_new_tokens": 0})"); }, "'max_new_tokens' must be a positive integer");
  expect_error([] { parse_gen(R"({"max_new_tokens": 1.5})"); }, "'max_new_tokens' must be a positive integer");
  expect_error([] { parse_gen(R"({"eos_token_id": "2"})"); }, "'eos_token_id' must be a token id");
  expect_error([] { parse_gen(R"({"eos_token_id": [2, -1]})"); }, "'eos_token_id' must be a token id");
  expect_error([] { parse_gen(R"([1, 2])"); }, "expected a JSON object");
  expect_error([] { parse_gen(R"({"temperature": )"); }, "invalid JSON");
}

}  // namespace
}  // namespace ts
