// Loading a broken model folder gives one clear error naming what is wrong, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "io/safetensors.h"
#include "model/drafter.h"
#include "model_test_util.h"

namespace ts {
namespace {

void expect_error(const std::function<void()>& fn, const std::string& phrase) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << phrase << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class LoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("load");
    write_random_model(dir_, tiny_qwen3_config(50, 32, 1), DType::F32, 7);
    config_ = nlohmann::json::parse(read_text_file(dir_ + "/config.json"));
  }
  void set_config(const nlohmann::json& j) { write(dir_ + "/config.json", j.dump()); }
  std::string dir_;
  nlohmann::json config_;
};

TEST_F(LoadErrors, LoadsWhenIntact) { EXPECT_NO_THROW(TargetModel::load(dir_)); }

TEST_F(LoadErrors, MissingConfig) {
  std::filesystem::remove(dir_ + "/config.json");
  expect_error([&] { TargetModel::load(dir_); }, "no config.json");
}

TEST_F(LoadErrors, BadJson) {
  write(dir_ + "/config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"], ");
  expect_error([&] { TargetModel::load(dir_); }, "invalid JSON");
}

TEST_F(LoadErrors, UnsupportedArchitecture) {
  config_["architectures"] = {"GPTNeoXForCausalLM"};
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "unsupported architecture");
}

TEST_F(LoadErrors, UnsupportedRopeTypeIsNamed) {
  config_["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "unsupported RoPE type 'dynamic' in 'rope_scaling'");
  config_.erase("rope_scaling");
  config_.erase("rope_theta");
  config_["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 1e4}};
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "unsupported RoPE type 'longrope' in 'rope_parameters'");
}

TEST_F(LoadErrors, MissingRopeBase) {
  config_.erase("rope_theta");
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "missing RoPE base");
  config_["rope_parameters"] = {{"rope_type", "default"}};  // v5 spelling without its base
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "missing RoPE base 'rope_parameters.rope_theta'");
}

TEST_F(LoadErrors, WrongShapeSaysExpectedVersusActual) {
  config_["intermediate_size"] = 48;  // the file has 64
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "expected shape");
}

TEST_F(LoadErrors, MissingTensor) {
  config_["tie_word_embeddings"] = false;  // now lm_head.weight is required and absent
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "lm_head.weight");
}

TEST_F(LoadErrors, BadHeadCounts) {
  config_["num_key_value_heads"] = 3;
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "multiple of num_key_value_heads");
}

TEST_F(LoadErrors, TruncatedWeights) {
  const std::string path = dir_ + "/model.safetensors";
  auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  expect_error([&] { TargetModel::load(dir_); }, "model.safetensors");
}

// A drafter folder next to a target; each test breaks one thing.
class DrafterLoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("drafter_load");
    target_ = tiny_qwen3_config(50, 32, 3);
    d_.block_size = 4;
    d_.markov_rank = 4;
    d_.target_layer_ids = {0, 2};
    d_.mask_token_id = 49;
    d_.num_layers = 1;
    d_.hidden_size = 16;  // narrower than the target: the tap width comes from the target
    d_.target_hidden_size = target_.hidden_size;
    d_.head_dim = 8;
    d_.num_heads = 2;
    d_.num_kv_heads = 1;
    d_.intermediate_size = 32;
    d_.vocab_size = 50;
    d_.rope.theta = 1e6;
    write_random_drafter(dir_, d_, DType::F32, 3);
    config_ = nlohmann::json::parse(read_text_file(dir_ + "/config.json"));
  }
  void set_config(const nlohmann::json& j) { write(dir_ + "/config.json", j.dump()); }
  std::string dir_;
  ModelConfig target_;
  DrafterConfig d_;
  nlohmann::json config_;
};

TEST_F(DrafterLoadErrors, LoadsWhenIntactWithThePublishedKeys) {
  EXPECT_FALSE(config_.contains("target_hidden_size"));
  EXPECT_FALSE(config_.contains("rope_theta"));
  EXPECT_EQ(config_["rope_parameters"]["rope_theta"].get<double>(), 1e6);
  auto d = Drafter::load(dir_, target_);
  EXPECT_EQ(d->tap_width(), 2 * 32);
  EXPECT_EQ(d->config().rope.theta, 1e6);
  config_["target_hidden_size"] = 32;  // accepted when it agrees with the target
  set_config(config_);
  EXPECT_NO_THROW(Drafter::load(dir_, target_));
}

TEST_F(DrafterLoadErrors, TapWidthIsCheckedAgainstFcWeight) {
  ModelConfig wider = tiny_qwen3_config(50, 48, 3);
  expect_error([&] { Drafter::load(dir_, wider); }, "fc.weight is [16, 64] but 2 taps");
  expect_error([&] { Drafter::load(dir_, wider); }, "need [16, 96]");
}

TEST_F(DrafterLoadErrors, InconsistentTargetHiddenSizeKey) {
  config_["target_hidden_size"] = 48;
  set_config(config_);
  expect_error([&] { Drafter::load(dir_, target_); }, "target_hidden_size 48 disagrees with the target's hidden_size 32");
}

TEST_F(DrafterLoadErrors, TargetMismatch) {
  expect_error([&] { Drafter::load(dir_, tiny_qwen3_config(60, 32, 3)); }, "vocab_size 50 != the target's vocab_size 60");
  expect_error([&] { Drafter::load(dir_, tiny_qwen3_config(50, 32, 2)); }, "target_layer_ids has layer 2");
}

TEST_F(DrafterLoadErrors, MarkovHeadTypes) {
  EXPECT_EQ(config_["markov_head_type"], "vanilla");
  for (const char* type : {"gated", "rnn", "lstm"}) {
    config_["markov_head_type"] = type;
    set_config(config_);
    expect_error([&] { Drafter::load(dir_, target_); }, std::string("markov_head_type '") + type + "' is not supported");
  }
  config_["markov_head_type"] = 3;
  set_config(config_);
  expect_error([&] { Drafter::load(dir_, target_); }, "'markov_head_type' must be a string");
  config_.erase("markov_head_type");  // absent = vanilla
  set_config(config_);
  EXPECT_NO_THROW(Drafter::load(dir_, target_));
}

TEST_F(DrafterLoadErrors, MarkovRankAndTensorsMustAgree) {
  config_["markov_rank"] = 0;  // but the file has markov tensors
  set_config(config_);
  expect_error([&] { Drafter::load(dir_, target_); }, "holds markov_head tensors");
  config_["markov_rank"] = 8;  // the tensors have rank 4
  set_config(config_);
  expect_error([&] { Drafter::load(dir_, target_); }, "markov_head.markov_w1.weight");
}

TEST_F(DrafterLoadErrors, DrafterWithoutMarkovHeadLoads) {
  d_.markov_rank = 0;
  const std::string dir = testing::temp_dir("drafter_nomarkov");
  write_random_drafter(dir, d_, DType::F32, 4);
  auto cfg = nlohmann::json::parse(read_text_file(dir + "/config.json"));
  EXPECT_FALSE(cfg.contains("markov_head_type"));
  auto d = Drafter::load(dir, target_);
  EXPECT_FALSE(d->has_markov_head());
  cfg.erase("markov_rank");  // absent = no Markov head
  write(dir + "/config.json", cfg.dump());
  EXPECT_FALSE(Drafter::load(dir, target_)->has_markov_head());
}

TEST_F(DrafterLoadErrors, MissingRopeBase) {
  config_["rope_parameters"].erase("rope_theta");
  set_config(config_);
  expect_error([&] { Drafter::load(dir_, target_); }, "missing RoPE base 'rope_parameters.rope_theta'");
  config_.erase("rope_parameters");
  set_config(config_);
  expect_error([&] { Drafter::load(dir_, target_); }, "missing RoPE base");
}

TEST(DrafterConfigErrors, MissingKeysAndBadTaps) {
  expect_error([] { parse_drafter_config("{}", "d/config.json"); }, "missing required key 'block_size'");
  expect_error([] {
    parse_drafter_config(R"({"block_size": 4, "markov_rank": 2, "mask_token_id": 3, "num_hidden_layers": 1,
      "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10, "rope_theta": 1e4,
      "target_layer_ids": []})",
                         "d/config.json");
  }, "target_layer_ids");
}

}  // namespace
}  // namespace ts
