// End-to-end properties of speculative generation on random tiny model pairs:
//  - greedy: every mode, priority, theta and cap gives exactly the tokens of target-only greedy decoding;
//  - sampling: the distribution of 3-token continuations matches the target's exact distribution (total
//    variation within a bound derived from the sample size);
//  - bookkeeping: statistics add up, stop tokens and max-token limits end generation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/tiny_pair.h"
#include "sampling/distribution.h"

namespace ts {
namespace {

using testing::exact_continuations;
using testing::make_pair;
using testing::Pair;

struct Arm {
  DecodeMode mode;
  DecodeMode priority;
  double theta;
  int node_cap, branch_cap, draft_len;
};

class GreedyEquality : public ::testing::TestWithParam<DType> {};

TEST_P(GreedyEquality, EveryModeMatchesTargetOnlyGreedy) {
  const std::vector<Arm> arms = {
      {DecodeMode::Chain, DecodeMode::Chain, 0, 4, 1, 3},     {DecodeMode::Chain, DecodeMode::Chain, 0, 6, 1, 6},
      {DecodeMode::Tree, DecodeMode::Tree, 0.0, 12, 3, 0},    {DecodeMode::Tree, DecodeMode::Tree, 0.05, 32, 4, 0},
      {DecodeMode::Tree, DecodeMode::Tree, 0.9, 32, 4, 0},    {DecodeMode::Tree, DecodeMode::Marginal, 0, 8, 2, 0},
      {DecodeMode::Tree, DecodeMode::LogQ, 0.01, 16, 4, 0},   {DecodeMode::Tree, DecodeMode::Tree, 0.0, 1, 1, 0},
  };
  int accepted_total = 0;
  for (uint64_t pair_seed : {11, 12}) {
    Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, GetParam(), pair_seed);
    Generator plain(*pair.target, nullptr);
    Generator spec_gen(*pair.target, pair.drafter.get(), spec_decode::Calibration{1.3, 0.4});
    for (int p = 0; p < 4; ++p) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 3 + p * 5; ++i) prompt.push_back(int32_t((pair_seed * 7 + p * 13 + i * 5) % 19));
      GenerateOptions base;
      base.max_new_tokens = 40;
      base.mode = DecodeMode::None;
      const auto want = plain.generate(prompt, base).ids;
      ASSERT_EQ(want.size(), 40u);
      for (const Arm& arm : arms) {
        GenerateOptions o = base;
        o.mode = arm.mode;
        o.mode = arm.priority;
        o.tree.theta = arm.theta;
        o.tree.node_cap = arm.node_cap;
        o.tree.branch_cap = arm.branch_cap;
        if (arm.draft_len) o.tree.draft_len = arm.draft_len;
        GenerationResult r = spec_gen.generate(prompt, o);
        EXPECT_EQ(r.ids, want) << "prompt " << p << " mode " << int(arm.priority) << " theta " << arm.theta
                               << " cap " << arm.node_cap;
        EXPECT_EQ(r.stats.generated_tokens, 40);
        EXPECT_LE(r.stats.accepted_draft_tokens + r.stats.rounds, 40 + 7);
        accepted_total += r.stats.accepted_draft_tokens;
      }
      // The round-level pricing (look-ahead across a cost step, greedy trees cut to their best prefix, per-node
      // work), on a staircase curve: the text is still the target's.
      CostModel staircase;
      staircase.batches = {1};
      staircase.tokens = {1, 2, 3, 4, 5, 8, 16};
      staircase.ms = {1.0, 1.0, 1.0, 1.5, 1.5, 1.55, 2.5};
      GenerateOptions priced = base;
      priced.mode = DecodeMode::Tree;
      priced.tree.theta = 0;
      priced.tree.node_cap = 12;
      priced.tree.branch_cap = 3;
      priced.fixed_pricing = RequestOptions::FixedPricing{staircase, 1, 0.01};
      const GenerationResult r = spec_gen.generate(prompt, priced);
      EXPECT_EQ(r.ids, want) << "prompt " << p << " round-level pricing";
      EXPECT_GT(r.stats.rounds, 0);
    }
  }
  // With a 20-token vocabulary some drafts must be accepted, or the test would not exercise acceptance at all.
  EXPECT_GT(accepted_total, 50);
}

INSTANTIATE_TEST_SUITE_P(DTypes, GreedyEquality, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(SampledLosslessness, ThreeTokenContinuationsMatchTarget) {
  // vocab 8: 512 possible continuations. N samples per arm. For a multinomial with K cells the expected L1 error
  // is <= sum_i sqrt(p_i (1 - p_i) / N) <= sqrt(K_eff / N); TV is half of L1. We use the exact per-cell bound
  // 0.5 * sum_i sqrt(p_i (1 - p_i) / N) from the true p, times 1.5 plus 0.01 for the fluctuation of TV itself
  // (its standard deviation is O(1/sqrt(N)) ~ 0.007 at N = 20000). A lossy verifier (e.g. accepting every
  // draft) moves TV by well over 0.1 on this random pair.
  Pair pair = make_pair(/*vocab=*/8, /*hidden=*/32, /*layers=*/1, /*block=*/4, DType::F32, 77);
  const std::vector<int32_t> prompt = {1, 5, 2};
  const int N = 20000;
  struct Case {
    SamplingParams params;
    DecodeMode mode;
    DecodeMode priority;
    int node_cap, branch_cap;
    double theta = 0;
    // Tokens generated; the first 3 are counted (their distribution is the target's 3-token one at any horizon).
    int horizon = 3;
  };
  SamplingParams t1;
  t1.temperature = 1.0f;
  SamplingParams filtered;
  filtered.temperature = 0.8f;
  // Sampled drafts are filtered by the same processors (draft_source.h). This random pair's drafter puts its mass
  // on tokens the target's nucleus never holds (top_k 5 / top_p 0.9 accepted nothing), so the processors here
  // cut less.
  filtered.top_k = 6;
  filtered.min_p = 0.02f;
  const std::vector<Case> cases = {{t1, DecodeMode::Tree, DecodeMode::Tree, 6, 3},
                                   {filtered, DecodeMode::Tree, DecodeMode::Tree, 8, 4},
                                   {t1, DecodeMode::Chain, DecodeMode::Chain, 3, 1},
                                   // theta > 0: the online calibration refit (on by default) changes how many
                                   // nodes the second round grows, from the first round's labels. Six tokens: a
                                   // round drafts no deeper than the request may still emit, so within three
                                   // there is never a second round.
                                   {t1, DecodeMode::Tree, DecodeMode::Tree, 8, 3, 0.15, 6}};
  Generator gen(*pair.target, pair.drafter.get(), spec_decode::Calibration{});
  for (const Case& c : cases) {
    std::map<std::vector<int32_t>, double> exact;
    exact_continuations(*pair.target, prompt, 3, c.params, &exact);
    double bound = 0;
    for (auto& [s, p] : exact) bound += 0.5 * std::sqrt(p * (1 - p) / N);
    bound = 1.5 * bound + 0.01;
    std::map<std::vector<int32_t>, double> counts;
    GenerateOptions o;
    o.max_new_tokens = c.horizon;
    o.mode = c.mode;
    o.mode = c.priority;
    o.tree.theta = c.theta;
    o.tree.node_cap = c.node_cap;
    o.tree.branch_cap = c.branch_cap;
    o.tree.draft_len = 3;
    o.sampling = c.params;
    long accepted = 0, refitted = 0;
    for (int i = 0; i < N; ++i) {
      o.sampling.seed = 1000 + i;
      GenerationResult r = gen.generate(prompt, o);
      ASSERT_EQ(r.ids.size(), size_t(c.horizon));
      counts[std::vector<int32_t>(r.ids.begin(), r.ids.begin() + 3)] += 1.0 / N;
      accepted += r.stats.accepted_draft_tokens;
      if (r.stats.rounds > 1)
        for (double shift : r.stats.calibration_shifts) refitted += std::abs(shift) >= 0.05;
    }
    if (c.theta > 0) {
      EXPECT_GT(refitted, N / 20) << "the online refit hardly moved; the case would not test it";
    }
    double tv = 0;
    for (auto& [s, p] : exact) tv += 0.5 * std::fabs(p - counts[s]);
    for (auto& [s, q] : counts)
      if (!exact.count(s)) tv += 0.5 * q;  // mass on continuations the target can never produce
    EXPECT_LT(tv, bound) << "temperature " << c.params.temperature << " top_k " << c.params.top_k;
    EXPECT_GT(accepted, N / 40) << "drafts were hardly ever accepted; the test would not exercise verification";
  }
}

TEST(Generation, OnlineCalibrationIsPerRequestAndCanBeTurnedOff) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/6, DType::F32, 21);
  Generator gen(*pair.target, pair.drafter.get(), spec_decode::Calibration{1.3, 0.4});
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.tree.theta = 0.1;
  o.tree.node_cap = 8;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  const GenerationResult first = gen.generate(prompt, o);
  const GenerationResult again = gen.generate(prompt, o);  // starts from the prior again, not from `first`'s fit
  ASSERT_GT(first.stats.rounds, 2);
  ASSERT_EQ(first.stats.calibration_shifts.size(), size_t(spec_decode::kRankBuckets));
  EXPECT_EQ(again.stats.calibration_shifts, first.stats.calibration_shifts);
  EXPECT_EQ(again.stats.tree_sizes, first.stats.tree_sizes);
  double moved = 0;
  for (double shift : first.stats.calibration_shifts) moved += std::abs(shift);
  EXPECT_GT(moved, 0.05);  // a random drafter is nowhere near the prior's (1.3, 0.4): the refit moves
  o.online_calibration = false;
  const GenerationResult fixed = gen.generate(prompt, o);
  EXPECT_TRUE(fixed.stats.calibration_shifts.empty());
  EXPECT_EQ(fixed.ids, first.ids);  // greedy: the trees differ, the tokens do not
}

TEST(Generation, StopTokenAndLimits) {
  Pair pair = make_pair(16, 32, 1, 4, DType::F32, 5);
  Generator gen(*pair.target, pair.drafter.get());
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.mode = DecodeMode::None;
  auto free_run = gen.generate({1, 2, 3}, o).ids;
  // Stop on the 5th generated token's id: generation ends right there, in every mode.
  o.stop_ids = {free_run[4]};
  size_t first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  for (DecodeMode mode : {DecodeMode::None, DecodeMode::Chain, DecodeMode::Tree}) {
    o.mode = mode;
    GenerationResult r = gen.generate({1, 2, 3}, o);
    EXPECT_EQ(r.ids.size(), first + 1);
    EXPECT_EQ(r.finish_reason, "stop");
  }
  // The context limit ends generation with "length", not an error.
  o.stop_ids.clear();
  o.max_context = 12;
  o.max_new_tokens = 100;
  GenerationResult r = gen.generate({1, 2, 3}, o);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_LE(r.ids.size(), 9u + 1);
  // Over-long prompts and unknown ids are errors with a message.
  EXPECT_THROW(gen.generate(std::vector<int32_t>(20, 1), o), Error);
  EXPECT_THROW(gen.generate({1, 99}, o), Error);
}

}  // namespace
}  // namespace ts
