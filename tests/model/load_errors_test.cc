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

TEST_F(LoadErrors, UnsupportedRopeScaling) {
  config_["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  set_config(config_);
  expect_error([&] { TargetModel::load(dir_); }, "unsupported rope_scaling type 'yarn'");
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

TEST(DrafterConfigErrors, MissingKeysAndBadTaps) {
  expect_error([] { parse_drafter_config("{}", "d/config.json"); }, "missing required key 'block_size'");
  expect_error([] {
    parse_drafter_config(R"({"block_size": 4, "markov_rank": 2, "mask_token_id": 3, "num_hidden_layers": 1,
      "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10, "target_layer_ids": []})",
                         "d/config.json");
  }, "target_layer_ids");
}

}  // namespace
}  // namespace ts
