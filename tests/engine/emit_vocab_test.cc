// EngineConfig::emit_vocab: a model whose vocabulary is padded past its tokenizer never emits the padded ids. The
// mask must equal banning those ids with -inf in every target row and in q (the min_tokens ban on stop ids does
// exactly that), so every mode, greedy and sampled, gives the same tokens and logprobs as that ban; and
// ModelBundle::emit_vocab() finds the tokenizer's size, in a folder and in a GGUF file whose converter padded the
// token list with unused "[PADn]" entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_bundle.h"
#include "engine/test_subjects.h"
#include "engine/tiny_pair.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"

namespace ts {
namespace {

using testing::kModes;
using testing::Subject;
using testing::subjects;
using testing::with_mode;

// The last 3 ids of each subject's vocabulary play the padding; a +100 bias on one of them makes it the greedy
// choice of any unmasked row.
TEST(EmitVocab, MaskEqualsBanningThePaddedIdsInEveryMode) {
  for (Subject& s : subjects()) {
    const int V = s.pair.target->config().vocab_size, E = V - 3;
    const int32_t pushed = E + 1;
    Generator masked(*s.pair.target, s.pair.drafter.get(), s.calibration);
    masked.set_emit_vocab(E);
    Generator unmasked(*s.pair.target, s.pair.drafter.get(), s.calibration);
    for (const std::vector<int32_t>& prompt : s.prompts) {
      for (float temperature : {0.0f, 0.9f}) {
        GenerateOptions o;
        o.max_new_tokens = 24;
        o.logprobs = 4;
        o.sampling.temperature = temperature;
        o.sampling.seed = 5;
        o.logit_bias = {{pushed, 100.0f}};
        // Without the mask the pushed id is emitted at every step.
        const GenerationResult raw = unmasked.generate(prompt, with_mode(o, DecodeMode::None));
        EXPECT_EQ(std::count(raw.ids.begin(), raw.ids.end(), pushed), int(raw.ids.size())) << s.name;
        // The same distribution as the mask: every padded id a stop id banned for the whole generation.
        GenerateOptions banned = o;
        banned.stop_ids.resize(size_t(V - E));
        std::iota(banned.stop_ids.begin(), banned.stop_ids.end(), E);
        banned.min_tokens = o.max_new_tokens;
        for (DecodeMode mode : kModes) {
          const std::string what = s.name + " T " + std::to_string(temperature) + " mode " + std::to_string(int(mode));
          const GenerationResult got = masked.generate(prompt, with_mode(o, mode));
          const GenerationResult want = unmasked.generate(prompt, with_mode(banned, mode));
          ASSERT_EQ(got.ids.size(), 24u) << what;
          EXPECT_TRUE(std::all_of(got.ids.begin(), got.ids.end(), [&](int32_t id) { return id < E; })) << what;
          EXPECT_EQ(got.ids, want.ids) << what;
          ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
          for (size_t i = 0; i < got.logprobs.size(); ++i) {
            EXPECT_EQ(got.logprobs[i].logprob, want.logprobs[i].logprob) << what << " token " << i;
            EXPECT_EQ(got.logprobs[i].top, want.logprobs[i].top) << what << " token " << i;
          }
        }
      }
    }
  }
}

TEST(EmitVocab, EngineChecksTheValue) {
  testing::Pair pair = testing::make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/1, /*block=*/4, DType::F32, 3);
  for (int bad : {-1, 21}) {
    EngineConfig c;
    c.emit_vocab = bad;
    try {
      Engine engine(*pair.target, pair.drafter.get(), c);
      ADD_FAILURE() << "emit_vocab " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("emit_vocab must be in [0, 20]"), std::string::npos) << e.what();
    }
  }
  EngineConfig whole;
  whole.emit_vocab = 20;  // the whole vocabulary: nothing to mask
  EXPECT_EQ(Engine(*pair.target, pair.drafter.get(), whole).config().emit_vocab, 0);
}

// A random target of `vocab` rows with the committed tiny BPE tokenizer (530 ids) or none.
std::string folder(const std::string& name, int vocab, bool with_tokenizer) {
  const std::string dir = testing::temp_dir(name);
  write_random_model(dir, tiny_qwen3_config(vocab, 32, 1), DType::F32, 7);
  if (with_tokenizer)
    std::filesystem::copy_file(std::string(TS_TEST_DATA) + "/tokenizer/tiny_bpe/tokenizer.json",
                               dir + "/tokenizer.json", std::filesystem::copy_options::overwrite_existing);
  return dir;
}

TEST(EmitVocab, BundleGivesTheTokenizerSizeOfAPaddedModel) {
  const ModelBundle padded = ModelBundle::load(folder("emit_vocab_padded", 544, true), "");
  ASSERT_TRUE(padded.tokenizer);
  ASSERT_EQ(padded.tokenizer->vocab_size(), 530);
  EXPECT_EQ(padded.emit_vocab(), 530);
  EXPECT_EQ(ModelBundle::load(folder("emit_vocab_exact", 530, true), "").emit_vocab(), 0);
  EXPECT_EQ(ModelBundle::load(folder("emit_vocab_none", 544, false), "").emit_vocab(), 0);
  // Generation on the padded model: every id decodes, with a padded id pushed to the top.
  Generator gen(*padded.target, nullptr);
  gen.set_emit_vocab(padded.emit_vocab());
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.mode = DecodeMode::None;
  o.logit_bias = {{540, 100.0f}};
  const GenerationResult r = gen.generate(padded.prompt_ids({}, "hello there", false, true), o);
  ASSERT_EQ(r.ids.size(), 12u);
  EXPECT_NO_THROW(padded.decode(r.ids));
  EXPECT_TRUE(std::all_of(r.ids.begin(), r.ids.end(), [](int32_t id) { return id < 530; }));
}

// llama.cpp's converter pads a token list shorter than the vocabulary with unused "[PADn]" tokens, which the GGUF
// tokenizer drops: the padded ids are masked as a folder's are.
TEST(EmitVocab, GgufWithPaddedTokenList) {
  const std::string dir = folder("emit_vocab_gguf", 544, true);
  bool skip_only = false;
  const std::string why =
      testing::gguf_from_folder(dir, dir + "/model.gguf", "--type q8_0 --tokenizer qwen2", &skip_only);
  if (!why.empty() && skip_only) GTEST_SKIP() << why;
  ASSERT_EQ(why, "");
  const ModelBundle b = ModelBundle::load(dir + "/model.gguf", "");
  ASSERT_TRUE(b.tokenizer);
  EXPECT_EQ(b.target->config().vocab_size, 544);
  EXPECT_EQ(b.emit_vocab(), 530);
}

}  // namespace
}  // namespace ts
