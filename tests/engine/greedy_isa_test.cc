// Greedy speculative output equals target-only greedy output under every ISA variant this CPU supports (core/cpu.h:
// scalar, avx2, avx512, avx512bf16). Each variant is batch-invariant on its own, which is what greedy identity
// rests on: a tree row must get the same logits as the same token decoded alone. The shapes are ragged (hidden 40,
// head_dim 12, intermediate 72, vocab 20: none a multiple of 16, most not of 8) so every kernel's masked tails run
// in both the tree batches and the single-token forwards. A 20-token vocabulary lets random drafts be accepted.
#include <gtest/gtest.h>

#include <string>

#include "core/cpu.h"
#include "engine/generator.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"
#include "engine/tiny_pair.h"

namespace ts {
namespace {

using testing::Pair;

testing::Pair make_ragged_pair(DType dtype, uint64_t seed) {
  const int vocab = 20, hidden = 40, layers = 2;
  ModelConfig c = tiny_qwen3_config(vocab, hidden, layers);
  c.head_dim = 12;
  c.intermediate_size = 72;
  DrafterConfig d = testing::tiny_drafter_config(vocab, hidden, layers, /*block=*/6);
  d.head_dim = 12;
  d.intermediate_size = 72;
  return testing::write_and_load_pair("greedy_isa", c, d, dtype, seed);
}

class GreedyUnderEachIsa : public ::testing::TestWithParam<std::tuple<Isa, DType>> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_isa(std::get<0>(GetParam()));
  }
  void TearDown() override { set_isa(saved_); }

 private:
  Isa saved_ = Isa::Scalar;
};

TEST_P(GreedyUnderEachIsa, SpeculativeEqualsTargetOnly) {
  const DType dtype = std::get<1>(GetParam());
  int accepted = 0;
  for (uint64_t seed : {21, 22}) {
    Pair pair = make_ragged_pair(dtype, seed);
    Generator plain(*pair.target, nullptr);
    Generator spec_gen(*pair.target, pair.drafter.get(), spec_decode::Calibration{1.3, 0.4});
    for (int p = 0; p < 3; ++p) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 4 + p * 7; ++i) prompt.push_back(int32_t((seed * 5 + p * 11 + i * 7) % 19));
      GenerateOptions base;
      base.max_new_tokens = 32;
      base.mode = DecodeMode::None;
      const std::vector<int32_t> want = plain.generate(prompt, base).ids;
      ASSERT_EQ(want.size(), 32u);
      for (auto [mode, priority, cap] : {std::tuple{DecodeMode::Chain, DecodeMode::Chain, 5},
                                         std::tuple{DecodeMode::Tree, DecodeMode::Tree, 24},
                                         std::tuple{DecodeMode::Tree, DecodeMode::Tree, 8}}) {
        GenerateOptions o = base;
        o.mode = mode;
        o.mode = priority;
        o.tree.node_cap = cap;
        o.tree.theta = 0.0;
        o.tree.branch_cap = mode == DecodeMode::Chain ? 1 : 4;
        if (mode == DecodeMode::Chain) o.tree.draft_len = cap;
        const GenerationResult r = spec_gen.generate(prompt, o);
        EXPECT_EQ(r.ids, want) << isa_name(active_isa()) << " seed " << seed << " prompt " << p << " cap " << cap;
        accepted += r.stats.accepted_draft_tokens;
      }
    }
  }
  // Every round's next token comes from the anchor's row of a tree batch; accepted drafts make deeper tree rows
  // count too, so some must be accepted (random pairs accept few: 9 over these 18 generations when written).
  EXPECT_GT(accepted, 4) << isa_name(active_isa());
  std::printf("%s %s: %d draft tokens accepted\n", isa_name(active_isa()), dtype_name(dtype), accepted);
}

INSTANTIATE_TEST_SUITE_P(Isa, GreedyUnderEachIsa,
                         ::testing::Combine(::testing::ValuesIn(supported_isas()),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return std::string(isa_name(std::get<0>(info.param))) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ts
