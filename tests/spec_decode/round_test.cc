// spec_decode::Round: the round the engine and bench round drive is exactly expand() + verify() over the drafted
// block's q, its outcome names the rows the caller keeps and reads, and the request's edits reach q.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "spec_decode/round.h"

namespace ts::spec_decode {
namespace {

constexpr int kVocab = 12, kBlock = 4;

struct Fixture {
  std::vector<float> base;    // [kBlock, kVocab] the drafter's U
  std::vector<float> markov;  // [kVocab, kVocab] a stand-in for W2 * W1[parent]
  std::vector<float> target;  // [64, kVocab] target rows, indexed by tree node (enough for any tree here)
  explicit Fixture(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.5f);
    for (int i = 0; i < kBlock * kVocab; ++i) base.push_back(n(rng));
    for (int i = 0; i < kVocab * kVocab; ++i) markov.push_back(n(rng));
    for (int i = 0; i < 64 * kVocab; ++i) target.push_back(n(rng));
  }
  void add_bias(int32_t parent, float* out) const {
    for (int v = 0; v < kVocab; ++v) out[v] += markov[size_t(parent) * kVocab + v];
  }
  DraftedBlock block() const {
    DraftedBlock b;
    b.vocab = kVocab;
    b.block_size = kBlock;
    b.base_logits = base.data();
    b.add_markov_bias = [this](int32_t parent, float* out) { add_bias(parent, out); };
    return b;
  }
  // The same q written out by hand, as the engine built it before the Round existed.
  DraftSource source() const {
    DraftSource s;
    s.vocab = kVocab;
    s.block_size = kBlock;
    s.base_logits = [this](int d, float* out) {
      std::memcpy(out, &base[size_t(d - 1) * kVocab], sizeof(float) * kVocab);
    };
    s.conditional_logits = [this](int d, int32_t parent, float* out) {
      std::memcpy(out, &base[size_t(d - 1) * kVocab], sizeof(float) * kVocab);
      add_bias(parent, out);
    };
    return s;
  }
};

TreeParams tree_params(float temperature) {
  TreeParams p;
  p.mode = DecodeMode::Tree;
  p.theta = 0;
  p.node_cap = 10;
  p.branch_cap = 3;
  p.temperature = temperature;
  return p;
}

SamplingParams sampling(float temperature) {
  SamplingParams s;
  s.temperature = temperature;
  return s;
}

TEST(Round, IsExactlyExpandThenVerify) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    for (float t : {0.0f, 0.7f, 1.0f}) {
      const Fixture f(seed);
      RandomChooser a(seed * 7 + 1), b(seed * 7 + 1);
      Round round(f.block());
      round.draft(3, tree_params(t), Calibration{1.2, 0.1}, a);
      const RoundOutcome out = round.finish(f.target.data(), sampling(t), a);

      const DraftSource source = f.source();
      const DraftTree tree = expand(source, 3, tree_params(t), Calibration{1.2, 0.1}, b);
      const VerifyResult vr = verify(tree, f.target.data(), sampling(t), source, b);
      ASSERT_EQ(round.tree().token, tree.token) << "seed " << seed << " T " << t;
      ASSERT_EQ(round.tree().parent, tree.parent);
      ASSERT_EQ(out.accepted, int(vr.accepted_nodes.size()));
      ASSERT_EQ(out.emitted.size(), vr.emitted.size());
      for (size_t i = 0; i < vr.emitted.size(); ++i) EXPECT_EQ(out.emitted[i].token, vr.emitted[i]);
      EXPECT_EQ(out.edges.size(), vr.edges.size());
      EXPECT_EQ(out.draft_nodes, tree.size() - 1);
      double predicted = 0;
      for (int node = 1; node < tree.size(); ++node) predicted += tree.survival[size_t(node)];
      EXPECT_DOUBLE_EQ(out.predicted, predicted);
    }
  }
}

TEST(Round, OutcomeNamesTheKeptRowsAndTheRowsTokensCameFrom) {
  const Fixture f(9);
  RandomChooser chooser(5);
  for (int r = 0; r < 20; ++r) {
    Round round(f.block());
    round.draft(r % kVocab, tree_params(r % 2 ? 1.0f : 0.0f), Calibration{}, chooser);
    const DraftTree& tree = round.tree();
    const RoundOutcome out = round.finish(f.target.data(), sampling(r % 2 ? 1.0f : 0.0f), chooser);
    ASSERT_EQ(out.kept_nodes.size(), size_t(out.accepted) + 1);
    ASSERT_EQ(out.emitted.size(), size_t(out.accepted) + 1);
    EXPECT_EQ(out.kept_nodes[0], 0) << "the anchor's row is always kept";
    for (size_t i = 0; i < out.kept_nodes.size(); ++i) {
      EXPECT_EQ(out.kept_depths[i], tree.depth[size_t(out.kept_nodes[i])]);
      EXPECT_EQ(out.kept_depths[i], int(i)) << "kept rows form the accepted path, one per depth";
      if (i > 0) EXPECT_EQ(tree.parent[size_t(out.kept_nodes[i])], out.kept_nodes[i - 1]);
    }
    // Accepted token i came from its parent's row; the bonus from the deepest kept row.
    for (int i = 0; i < out.accepted; ++i) {
      EXPECT_EQ(out.emitted[size_t(i)].token, tree.token[size_t(out.kept_nodes[size_t(i) + 1])]);
      EXPECT_EQ(out.emitted[size_t(i)].row, out.kept_nodes[size_t(i)]);
    }
    EXPECT_EQ(out.emitted.back().row, out.kept_nodes.back());
  }
}

TEST(Round, TheRequestsEditsReachQ) {
  const Fixture f(4);
  constexpr int32_t kBanned = 5;
  for (float t : {0.0f, 1.0f}) {
    RandomChooser chooser(11);
    for (int r = 0; r < 30; ++r) {
      DraftedBlock block = f.block();
      block.edit = [](int, float* logits) { logits[kBanned] = -std::numeric_limits<float>::infinity(); };
      Round round(std::move(block));
      round.draft(0, tree_params(t), Calibration{}, chooser);
      const DraftTree& tree = round.tree();
      EXPECT_GT(tree.size(), 1);
      for (int node = 1; node < tree.size(); ++node) EXPECT_NE(tree.token[size_t(node)], kBanned) << "T " << t;
      round.finish(f.target.data(), sampling(t), chooser);  // verification reads the same edited q
    }
  }
}

TEST(Round, RefusesAnEmptyBlockAndFinishBeforeDraft) {
  EXPECT_THROW(Round(DraftedBlock{}), Error);
  const Fixture f(1);
  RandomChooser chooser(1);
  const Round round(f.block());
  EXPECT_THROW(round.finish(f.target.data(), sampling(0), chooser), Error);
}

}  // namespace
}  // namespace ts::spec_decode
