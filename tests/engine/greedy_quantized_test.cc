// Greedy speculative output on a quantized target (--quantize q8_0 / q4_0 / q4_k_m) equals target-only greedy output on
// that same quantized target, under every ISA variant this CPU supports, with a native and a quantized drafter. What it rests on: the integer GEMM gives
// a row the same bits whatever rows share the call (kernels/cpu/qgemm.h), so a tree row's logits equal the same
// token decoded alone. Shapes are multiples of 32 (the quantized formats' block) except the 20-token vocabulary
// (the lm_head's output rows), and the scheme is checked to have quantized every projection.
#include <gtest/gtest.h>

#include <string>

#include "core/cpu.h"
#include "engine/generator.h"
#include "engine/tiny_pair.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"

namespace ts {
namespace {

class GreedyQuantized : public ::testing::TestWithParam<std::tuple<Isa, WeightScheme>> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_isa(std::get<0>(GetParam()));
  }
  void TearDown() override { set_isa(saved_); }

 private:
  Isa saved_ = Isa::Scalar;
};

TEST_P(GreedyQuantized, SpeculativeEqualsTargetOnly) {
  const WeightScheme scheme = std::get<1>(GetParam());
  // q4_k_m needs widths that are multiples of 256 (the K-quants' super-block), or it falls back to Q8_0.
  const bool k_quants = scheme == WeightScheme::Q4_K_M;
  const int vocab = 20, hidden = k_quants ? 256 : 64, layers = 2;
  ModelConfig c = tiny_qwen3_config(vocab, hidden, layers);
  c.head_dim = k_quants ? 64 : 16;
  c.intermediate_size = k_quants ? 512 : 96;
  DrafterConfig d = testing::tiny_drafter_config(vocab, hidden, layers, /*block=*/6);
  const std::string dir = testing::temp_dir("greedy_quantized");
  int accepted = 0;
  for (uint64_t seed : {31, 32}) {
    write_random_model(dir + "/target", c, DType::BF16, seed);
    write_random_drafter(dir + "/drafter", d, DType::BF16, seed + 1);
    LoadOptions lo;
    lo.weights = scheme;
    auto target = TargetModel::load(dir + "/target", lo);
    const char* want_format = scheme == WeightScheme::Q8_0   ? "q8_0 (projections Q8_0, lm_head Q8_0)"
                              : scheme == WeightScheme::Q4_0 ? "q4_0 (projections Q4_0, lm_head Q8_0)"
                                                             : "q4_k_m (projections Q4_K+Q6_K, lm_head Q6_K)";
    ASSERT_EQ(target->weight_format(), want_format);
    // The second seed quantizes the drafter too (--drafter-quantize): any q keeps greedy output the target's.
    const WeightScheme drafter_scheme = seed == 32 ? scheme : WeightScheme::Native;
    auto drafter = Drafter::load(dir + "/drafter", target->config(), drafter_scheme);
    ASSERT_EQ(drafter->weight_format(), weight_scheme_name(drafter_scheme));
    Generator plain(*target, nullptr);
    Generator spec_gen(*target, drafter.get(), spec_decode::Calibration{1.3, 0.4});
    for (int p = 0; p < 3; ++p) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 4 + p * 7; ++i) prompt.push_back(int32_t((seed * 5 + p * 11 + i * 7) % 19));
      GenerateOptions base;
      base.max_new_tokens = 32;
      base.mode = DecodeMode::None;
      const std::vector<int32_t> want = plain.generate(prompt, base).ids;
      ASSERT_EQ(want, testing::greedy_reference(*target, prompt, 32));
      for (auto [mode, cap] : {std::pair{DecodeMode::Chain, 5}, {DecodeMode::Tree, 24}, {DecodeMode::Tree, 8}}) {
        GenerateOptions o = base;
        o.mode = mode;
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
  // Tree rows past the anchor only count when drafts are accepted.
  EXPECT_GT(accepted, 4) << isa_name(active_isa());
}

INSTANTIATE_TEST_SUITE_P(Isa, GreedyQuantized,
                         ::testing::Combine(::testing::ValuesIn(supported_isas()),
                                            ::testing::Values(WeightScheme::Q8_0, WeightScheme::Q4_0,
                                                              WeightScheme::Q4_K_M)),
                         [](const auto& info) {
                           return std::string(isa_name(std::get<0>(info.param))) + "_" +
                                  weight_scheme_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ts
