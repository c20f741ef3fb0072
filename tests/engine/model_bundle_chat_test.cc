// ModelBundle and chat templates: a folder loads whatever its template (ChatML or not), a folder without one
// still takes plain-text prompts, and --chat there is a clear error; chat prompts keep contents from forging
// special tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "engine/model_bundle.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"

namespace ts {
namespace {

using testing::temp_dir;

// A random tiny target with the committed tiny BPE tokenizer and, if given, a tokenizer_config.json.
std::string model_folder(const std::string& name, const std::string& tokenizer_config) {
  const std::string dir = temp_dir(name);
  write_random_model(dir, tiny_qwen3_config(64, 32, 1), DType::F32, 7);
  std::filesystem::copy_file(std::string(TS_TEST_DATA) + "/tokenizer/tiny_bpe/tokenizer.json", dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  if (!tokenizer_config.empty()) std::ofstream(dir + "/tokenizer_config.json") << tokenizer_config;
  return dir;
}

std::string chat_error(const ModelBundle& b) {
  try {
    b.prompt_ids({}, "hi", /*chat=*/true, true);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelBundleChat, FolderWithoutTemplateGeneratesFromPlainText) {
  for (const std::string& config : {std::string(), std::string(R"({"eos_token": "<|endoftext|>"})")}) {
    const ModelBundle b = ModelBundle::load(model_folder("bundle_no_template", config), "");
    ASSERT_TRUE(b.tokenizer);
    EXPECT_FALSE(b.chat_template);
    EXPECT_EQ(b.prompt_ids({}, "hello there", false, true), b.tokenizer->encode("hello there"));
    EXPECT_NE(chat_error(b).find("no chat template"), std::string::npos) << chat_error(b);
    EXPECT_EQ(b.stop_ids(), b.target->config().eos_token_ids);
  }
}

TEST(ModelBundleChat, AnyTemplateLoads) {
  // A Mistral-style template: not ChatML, raises on a system turn.
  const std::string config = R"({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "chat_template":
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}[INST] {{ m.content | trim }} [/INST]{% endfor %}"})";
  const ModelBundle b = ModelBundle::load(model_folder("bundle_inst", config), "");
  ASSERT_TRUE(b.chat_template);
  const std::vector<int32_t> ids = b.prompt_ids({}, "  hi <|im_start|> ", true, true);
  EXPECT_EQ(b.tokenizer->decode(ids), "<|endoftext|>[INST] hi <|im_start|> [/INST]");
  const int32_t start = b.tokenizer->token_id("<|im_start|>"), bos = b.tokenizer->token_id("<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 0);  // the content's marker stayed text
  EXPECT_EQ(ids.front(), bos);                               // the template's own bos is the special token
  EXPECT_EQ(b.stop_ids(), std::vector<int32_t>{bos});
}

TEST(ModelBundleChat, BrokenTemplateFailsOnlyForChat) {
  const ModelBundle b = ModelBundle::load(model_folder("bundle_broken", R"({"chat_template": "{% for m in messages %}"})"), "");
  EXPECT_FALSE(b.chat_template);
  EXPECT_EQ(b.prompt_ids({}, "plain", false, true), b.tokenizer->encode("plain"));
  EXPECT_NE(chat_error(b).find("syntax error"), std::string::npos) << chat_error(b);
}

}  // namespace
}  // namespace ts
