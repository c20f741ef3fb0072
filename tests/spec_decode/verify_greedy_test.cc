// Greedy losslessness end to end: multi-round expand + verify at temperature 0 emits exactly the tokens of plain
// greedy decoding of the target, for every mode, theta and cap, and for trees drawn greedily or sampled.
// Also: sampled verification at temperature -> 0 agrees with the greedy walk on the same tree.
#include <gtest/gtest.h>

#include "core/error.h"
#include "spec_decode/expand.h"
#include "spec_decode/synthetic_pair.h"
#include "spec_decode/verify.h"

namespace ts::spec_decode {
namespace {

using testing::SyntheticDrafter;
using testing::SyntheticTarget;

struct RunStats {
  std::vector<int32_t> tokens;
  int rounds = 0;
  int accepted = 0;
};

// Generates n tokens after prompt with rounds of expand + verify.
RunStats speculative_decode(const SyntheticTarget& target, SyntheticDrafter drafter, std::vector<int32_t> context,
                            const TreeParams& tree_params, const SamplingParams& sampling, int n, Chooser& chooser) {
  RunStats stats;
  while (static_cast<int>(stats.tokens.size()) < n) {
    drafter.inform(target, context, 1.0f, 1.5f);  // this round's drafter
    const DraftSource source = drafter.source();
    const DraftTree tree = expand(source, context.back(), tree_params, Calibration{1.2, 0.1}, chooser);
    const std::vector<float> rows = testing::tree_target_logits(target, context, tree);
    const VerifyResult r = verify(tree, rows.data(), sampling, source, chooser);
    EXPECT_EQ(r.emitted.size(), r.accepted_nodes.size() + 1);
    for (int32_t t : r.emitted) {
      if (static_cast<int>(stats.tokens.size()) < n) stats.tokens.push_back(t);
      context.push_back(t);
    }
    stats.accepted += static_cast<int>(r.accepted_nodes.size());
    ++stats.rounds;
  }
  return stats;
}

TEST(VerifyGreedy, EveryModeThetaAndCapMatchesPlainGreedyDecoding) {
  const int n = 24;
  int accepted = 0, runs = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SyntheticTarget target;
    target.vocab = 12;
    target.salt = seed;
    const SyntheticDrafter drafter = SyntheticDrafter::random(12, 4, 3, seed + 100);
    const std::vector<int32_t> prompt = {static_cast<int32_t>(seed), 4, 7};
    const std::vector<int32_t> want = target.greedy_continuation(prompt, n);
    for (DecodeMode mode : {DecodeMode::Tree, DecodeMode::Chain, DecodeMode::Marginal, DecodeMode::LogQ}) {
      for (double theta : {0.0, 0.05, 0.3, 0.9}) {
        for (auto [branch, nodes] : {std::pair{1, 1}, {2, 4}, {3, 8}, {4, 16}}) {
          for (float draft_temperature : {0.0f, 1.0f}) {  // a sampled tree verified greedily is fine too
            TreeParams t;
            t.mode = mode;
            t.theta = theta;
            t.branch_cap = branch;
            t.node_cap = nodes;
            t.draft_len = nodes;
            t.temperature = draft_temperature;
            RandomChooser chooser(seed);
            const RunStats got = speculative_decode(target, drafter, prompt, t, SamplingParams{}, n, chooser);
            ASSERT_EQ(got.tokens, want) << "mode " << static_cast<int>(mode) << " theta " << theta << " branch "
                                        << branch << " nodes " << nodes << " draftT " << draft_temperature;
            accepted += got.accepted;
            ++runs;
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, runs * 4) << "drafts were rarely accepted: the test would not exercise accepted paths";
}

// At temperature 1e-4 the processed target is one-hot on the argmax (the synthetic logits have gaps >> 1e-4), so
// sampled verification must walk exactly where the greedy walk does, on the same (sampled) trees.
TEST(VerifyGreedy, SampledVerificationAtTinyTemperatureAgreesWithGreedyWalk) {
  SyntheticTarget target;
  target.vocab = 10;
  SyntheticDrafter drafter = SyntheticDrafter::random(10, 4, 2, 55);
  RandomChooser chooser(5);
  int accepted = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int32_t> context = {trial % 10, (trial * 7) % 10};
    drafter.inform(target, context, 1.0f, 1.0f);
    const DraftSource source = drafter.source();
    TreeParams t;
    t.branch_cap = 3;
    t.node_cap = 10;
    t.theta = 0;
    t.temperature = trial % 2 ? 1e-4f : 1.0f;
    const DraftTree tree = expand(source, context.back(), t, Calibration{}, chooser);
    const std::vector<float> rows = testing::tree_target_logits(target, context, tree);
    SamplingParams cold;
    cold.temperature = 1e-4f;
    const VerifyResult sampled = verify(tree, rows.data(), cold, source, chooser);
    const VerifyResult greedy = verify(tree, rows.data(), SamplingParams{}, source, chooser);
    EXPECT_EQ(sampled.emitted, greedy.emitted) << "trial " << trial;
    EXPECT_EQ(sampled.accepted_nodes, greedy.accepted_nodes);
    accepted += static_cast<int>(greedy.accepted_nodes.size());
  }
  EXPECT_GT(accepted, 100);
}

// Calibration labels, greedy and sampled: every child of every node on the accepted path gets one record (in
// sampling mode including siblings after the accepted one, never tested, labelled 0); exactly the accepted
// children are labelled 1; children of nodes off the path get none.
TEST(VerifyGreedy, EdgeRecordsCoverChildrenOfThePath) {
  SyntheticTarget target;
  target.vocab = 8;
  SyntheticDrafter drafter = SyntheticDrafter::random(8, 4, 2, 56);
  RandomChooser chooser(6);
  for (float temperature : {0.0f, 1.0f}) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<int32_t> context = {trial % 8};
      drafter.inform(target, context, 1.0f, 1.0f);
      const DraftSource source = drafter.source();
      TreeParams t;
      t.branch_cap = 3;
      t.node_cap = 9;
      t.theta = 0;
      t.temperature = temperature;
      const DraftTree tree = expand(source, context.back(), t, Calibration{}, chooser);
      const std::vector<float> rows = testing::tree_target_logits(target, context, tree);
      SamplingParams sampling;
      sampling.temperature = temperature;
      const VerifyResult r = verify(tree, rows.data(), sampling, source, chooser);
      std::vector<EdgeRecord> want;
      int32_t node = 0;
      for (size_t depth = 0; depth <= r.accepted_nodes.size(); ++depth) {
        const int32_t next = depth < r.accepted_nodes.size() ? r.accepted_nodes[depth] : -1;
        for (int32_t kid : tree.children(node)) {
          want.push_back(EdgeRecord{clamped_logit(tree.draft_q[kid]), static_cast<uint8_t>(kid == next),
                                    tree.depth[kid], tree.sibling_rank[kid]});
        }
        node = next;
      }
      ASSERT_EQ(r.edges.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(r.edges[i].logit_q, want[i].logit_q);
        EXPECT_EQ(r.edges[i].accepted, want[i].accepted);
        EXPECT_EQ(r.edges[i].depth, want[i].depth);
        EXPECT_EQ(r.edges[i].sibling_rank, want[i].sibling_rank);
      }
      EXPECT_EQ(r.last_node, r.accepted_nodes.empty() ? 0 : r.accepted_nodes.back());
    }
  }
}

TEST(VerifyGreedy, RejectsMismatchedInput) {
  SyntheticDrafter drafter = SyntheticDrafter::random(4, 2, 1, 1);
  const DraftSource source = drafter.source();
  DraftTree tree;
  tree.add(0, -1, 0, 1, 1);
  tree.add(7, 0, 0, 0.5, 0.5f);  // token outside the vocabulary
  std::vector<float> rows(2 * 4, 0.0f);
  RandomChooser chooser(0);
  EXPECT_THROW(verify(tree, rows.data(), SamplingParams{}, source, chooser), Error);
  tree.token[1] = 1;
  tree.sibling_rank[1] = 1;  // the first child must have rank 0
  EXPECT_THROW(verify(tree, rows.data(), SamplingParams{}, source, chooser), Error);
}

}  // namespace
}  // namespace ts::spec_decode
