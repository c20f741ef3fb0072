// A drafter without a Markov head (markov_rank 0, DFlash-style) loads and runs chain and marginal-ranked trees:
// greedy output equals target-only greedy, and some drafts are accepted.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"

namespace ts {
namespace {

TEST(NoMarkovDrafter, ChainAndMarginalTreesMatchTargetGreedy) {
  const std::string dir = testing::temp_dir("nomarkov_pair");
  const int vocab = 20, hidden = 32;
  write_random_model(dir + "/target", tiny_qwen3_config(vocab, hidden, 2), DType::F32, 21);
  DrafterConfig d;
  d.block_size = 5;
  d.markov_rank = 0;
  d.target_layer_ids = {0, 1};
  d.mask_token_id = vocab - 1;
  d.num_layers = 1;
  d.hidden_size = 16;  // narrower than the target
  d.target_hidden_size = hidden;
  d.head_dim = 8;
  d.num_heads = 2;
  d.num_kv_heads = 2;
  d.intermediate_size = 32;
  d.vocab_size = vocab;
  write_random_drafter(dir + "/drafter", d, DType::F32, 22);
  auto target = TargetModel::load(dir + "/target");
  auto drafter = Drafter::load(dir + "/drafter", target->config());
  ASSERT_FALSE(drafter->has_markov_head());

  Generator plain(*target, nullptr);
  Generator spec_gen(*target, drafter.get());
  int accepted = 0;
  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 4 + 3 * p; ++i) prompt.push_back(int32_t((7 * p + 5 * i + 1) % (vocab - 1)));
    GenerateOptions base;
    base.max_new_tokens = 30;
    base.mode = DecodeMode::None;
    const auto want = plain.generate(prompt, base).ids;
    for (DecodeMode priority : {DecodeMode::Chain, DecodeMode::Marginal}) {
      GenerateOptions o = base;
      o.mode = priority;
      o.tree.node_cap = priority == DecodeMode::Chain ? 4 : 8;
      o.tree.branch_cap = priority == DecodeMode::Chain ? 1 : 2;
      o.tree.draft_len = 4;
      o.tree.theta = 0;
      GenerationResult r = spec_gen.generate(prompt, o);
      EXPECT_EQ(r.ids, want) << "prompt " << p << " priority " << int(priority);
      accepted += r.stats.accepted_draft_tokens;
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace ts
