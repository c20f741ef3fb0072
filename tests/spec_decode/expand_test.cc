// Tree expansion: shapes (chain at high theta, fixed-N trees at theta 0, chain mode), best-first order against a
// brute-force reference, survivals, marginal and log-q priorities, sampled draws, and the cost of expansion.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/timer.h"
#include "spec_decode/expand.h"
#include "spec_decode/synthetic_pair.h"

namespace ts::spec_decode {
namespace {

using testing::SyntheticDrafter;

// q of node's children, computed here with plain softmax (independent of draft_distribution()).
std::vector<double> child_q(const DraftSource& source, int child_depth, int32_t parent_token, bool marginal = false) {
  std::vector<float> logits(source.vocab);
  if (marginal) {
    source.base_logits(child_depth, logits.data());
  } else {
    source.conditional_logits(child_depth, parent_token, logits.data());
  }
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> q(source.vocab);
  double sum = 0;
  for (int i = 0; i < source.vocab; ++i) sum += q[i] = std::exp(static_cast<double>(logits[i]) - m);
  for (double& v : q) v /= sum;
  return q;
}

int32_t top1(const std::vector<double>& q) { return static_cast<int32_t>(std::max_element(q.begin(), q.end()) - q.begin()); }

TreeParams params(DecodeMode mode, int branch_cap, int node_cap, double theta) {
  TreeParams t;
  t.mode = mode;
  t.branch_cap = branch_cap;
  t.node_cap = node_cap;
  t.theta = theta;
  return t;
}

RandomChooser unused_chooser() { return RandomChooser(0); }

TEST(Expand, HighThetaGivesTheTopOnePath) {
  int longest = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const SyntheticDrafter d = SyntheticDrafter::random(8, 5, 2, seed, 4, 1);  // peaked q
    const DraftSource s = d.source();
    const Calibration cal{1.4, 0.3};
    // No two siblings can both have p_hat > p_hat(0.5) (their q would sum past 1), so the tree is a chain.
    TreeParams t = params(DecodeMode::Tree, 4, 16, cal.p_hat(0.5) + 1e-9);
    RandomChooser chooser = unused_chooser();
    const DraftTree tree = expand(s, 3, t, cal, chooser);
    tree.validate(8);
    for (int i = 1; i < tree.size(); ++i) {
      EXPECT_EQ(tree.parent[i], i - 1) << "node " << i << " is not on a chain";
      EXPECT_EQ(tree.token[i], top1(child_q(s, tree.depth[i], tree.token[i - 1])));
      EXPECT_GE(tree.survival[i], t.theta * (1 - 1e-6));
    }
    // The same prefix as chain mode.
    TreeParams chain = params(DecodeMode::Chain, 1, 0, 0);
    chain.draft_len = 5;
    const DraftTree c = expand(s, 3, chain, cal, chooser);
    for (int i = 1; i < tree.size(); ++i) EXPECT_EQ(tree.token[i], c.token[i]);
    longest = std::max(longest, tree.size() - 1);
  }
  EXPECT_GE(longest, 2) << "the test never produced a chain longer than 1";
}

TEST(Expand, ThetaZeroFillsNodeCap) {
  const SyntheticDrafter d = SyntheticDrafter::random(8, 4, 2, 5);
  const DraftSource s = d.source();
  for (DecodeMode mode : {DecodeMode::Tree, DecodeMode::Marginal, DecodeMode::LogQ}) {
    for (float temperature : {0.0f, 1.0f}) {
      for (int n : {1, 2, 5, 13, 40}) {
        TreeParams t = params(mode, 3, n, 0);
        t.temperature = temperature;
        RandomChooser chooser(n);
        const DraftTree tree = expand(s, 0, t, Calibration{}, chooser);
        tree.validate(8);
        EXPECT_EQ(tree.size() - 1, n);
        for (int i = 0; i < tree.size(); ++i) {
          EXPECT_LE(static_cast<int>(tree.children(i).size()), 3);
          EXPECT_LE(tree.depth[i], 4);
        }
      }
    }
  }
}

TEST(Expand, ChainModeGivesDraftLenNodes) {
  const SyntheticDrafter d = SyntheticDrafter::random(8, 4, 2, 6);
  const DraftSource s = d.source();
  for (int len : {0, 1, 3, 4, 9}) {
    for (float temperature : {0.0f, 0.8f}) {
      TreeParams t = params(DecodeMode::Chain, 5, 2, 0.99);  // branch_cap, node_cap and theta are ignored
      t.draft_len = len;
      t.temperature = temperature;
      RandomChooser chooser(len);
      const DraftTree tree = expand(s, 1, t, Calibration{}, chooser);
      EXPECT_EQ(tree.size() - 1, std::min(len, 4));
      for (int i = 1; i < tree.size(); ++i) {
        EXPECT_EQ(tree.parent[i], i - 1);
        if (temperature == 0) {
          EXPECT_EQ(tree.token[i], top1(child_q(s, i, tree.token[i - 1])));
        }
      }
    }
  }
}

// Survivals of every node of the full branch-ary greedy tree under anchor (children: the branch largest q, each
// priced with its sibling rank and depth), best first: the brute-force reference of best-first expansion.
std::vector<double> full_tree_survivals(const DraftSource& s, const Calibration& cal, int branch, int32_t anchor) {
  std::vector<double> all;
  std::function<void(int32_t, int, double)> walk = [&](int32_t token, int depth, double survival) {
    if (depth == s.block_size) return;
    const std::vector<double> q = child_q(s, depth + 1, token);
    std::vector<int32_t> order(q.size());
    for (size_t i = 0; i < q.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return q[a] > q[b]; });
    for (int r = 0; r < branch; ++r) {
      const double child = survival * cal.p_hat(q[order[r]], r, depth + 1);
      all.push_back(child);
      walk(order[r], depth + 1, child);
    }
  };
  walk(anchor, 0, 1.0);
  std::sort(all.rbegin(), all.rend());
  return all;
}

// Greedy best-first: the N nodes are the N best of the full branch_cap-ary tree (brute force), and survivals are
// products of p_hat along the path.
TEST(Expand, GreedyTreeIsTheBestNByBruteForce) {
  const SyntheticDrafter d = SyntheticDrafter::random(7, 3, 2, 8);
  const DraftSource s = d.source();
  const Calibration cal{1.2, -0.2};
  const int branch = 3;
  const std::vector<double> all = full_tree_survivals(s, cal, branch, 2);  // every node of the full tree, best first
  for (int n : {1, 4, 10, 25}) {
    RandomChooser chooser = unused_chooser();
    const DraftTree tree = expand(s, 2, params(DecodeMode::Tree, branch, n, 0), cal, chooser);
    ASSERT_EQ(tree.size() - 1, n);
    std::vector<double> got;
    for (int i = 1; i < tree.size(); ++i) {
      got.push_back(tree.survival[i]);
      const std::vector<double> q = child_q(s, tree.depth[i], tree.token[tree.parent[i]]);
      EXPECT_NEAR(tree.draft_q[i], q[tree.token[i]], 1e-6);  // q is a float softmax
      EXPECT_NEAR(tree.survival[i], tree.survival[tree.parent[i]] * cal.p_hat(q[tree.token[i]]), 1e-6);
    }
    std::sort(got.rbegin(), got.rend());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(got[i], all[i], 1e-6) << "rank " << i;
    // With theta between the n-th and (n+1)-th survival, node_cap is not needed to stop at n.
    if (all[n - 1] > all[n] * (1 + 1e-5)) {
      const DraftTree by_theta =
          expand(s, 2, params(DecodeMode::Tree, branch, 1000, std::sqrt(all[n - 1] * all[n])), cal, chooser);
      EXPECT_EQ(by_theta.size() - 1, n);
    }
  }
}

// Best-first prices every child with its own sibling rank and depth: the same brute force as above, under a
// calibration with rank and depth offsets (a deep first child can now be worth less than a shallow sibling).
TEST(Expand, GreedyTreeWithRankAndDepthOffsetsIsTheBestN) {
  const SyntheticDrafter d = SyntheticDrafter::random(7, 4, 2, 21);
  const DraftSource s = d.source();
  Calibration cal{1.1, 0.8};
  cal.rank_offset[1] = -0.7, cal.rank_offset[2] = -1.2, cal.rank_offset[3] = -2.0;
  cal.depth_offset[1] = -0.6, cal.depth_offset[2] = -1.1, cal.depth_offset[3] = -1.9;
  const int branch = 3;
  const std::vector<double> all = full_tree_survivals(s, cal, branch, 2);  // every node of the full tree, best first
  for (int n : {3, 8, 20}) {
    RandomChooser chooser = unused_chooser();
    const DraftTree tree = expand(s, 2, params(DecodeMode::Tree, branch, n, 0), cal, chooser);
    ASSERT_EQ(tree.size() - 1, n);
    std::vector<double> got;
    for (int i = 1; i < tree.size(); ++i) {
      got.push_back(tree.survival[i]);
      const double q = tree.draft_q[i];
      EXPECT_NEAR(tree.survival[i],
                  tree.survival[tree.parent[i]] * cal.p_hat(q, tree.sibling_rank[i], tree.depth[i]), 1e-6);
    }
    std::sort(got.rbegin(), got.rend());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(got[i], all[i], 1e-6) << "n " << n << " rank " << i;
  }
}

// A strongly negative offset for depths >= 2 makes a sibling worth more than any grandchild, greedy and sampled
// (the sampled slots read PHatTable's row for the child's depth); without it the same drafter grows a chain.
TEST(Expand, DepthOffsetPrefersASiblingOverAGrandchild) {
  const SyntheticDrafter d = SyntheticDrafter::random(8, 4, 2, 5, 4, 1);  // peaked q: a first child is likely
  const DraftSource s = d.source();
  Calibration deep_is_bad;
  for (int k = 1; k < kDepthBuckets; ++k) deep_is_bad.depth_offset[k] = -20;
  for (float temperature : {0.0f, 1.0f}) {
    int chains = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      TreeParams t = params(DecodeMode::Tree, 4, 3, 0);
      t.temperature = temperature;
      RandomChooser plain_chooser(seed), offset_chooser(seed);
      const DraftTree plain = expand(s, 1, t, Calibration{}, plain_chooser);
      const DraftTree shallow = expand(s, 1, t, deep_is_bad, offset_chooser);
      ASSERT_EQ(shallow.size(), 4);
      for (int i = 1; i < shallow.size(); ++i) EXPECT_EQ(shallow.depth[i], 1) << "T " << temperature << " node " << i;
      for (int i = 1; i < plain.size(); ++i) chains += plain.depth[i] > 1;
    }
    EXPECT_GT(chains, 0) << "T " << temperature << ": without the offset no tree went deeper, so nothing was shown";
  }
}

TEST(Expand, MarginalIgnoresTheParentAndLogQMultipliesQ) {
  const SyntheticDrafter d = SyntheticDrafter::random(8, 3, 2, 9);
  const DraftSource s = d.source();
  RandomChooser chooser = unused_chooser();
  const DraftTree m = expand(s, 4, params(DecodeMode::Marginal, 2, 12, 0), Calibration{3, 2}, chooser);
  EXPECT_EQ(m.q_source, QSource::Base);
  for (int i = 1; i < m.size(); ++i) {
    const std::vector<double> q = child_q(s, m.depth[i], -1, /*marginal=*/true);
    EXPECT_NEAR(m.draft_q[i], q[m.token[i]], 1e-6);
    // Uncalibrated: survival = product of q, whatever the calibration.
    EXPECT_NEAR(m.survival[i], m.survival[m.parent[i]] * q[m.token[i]], 1e-6);
    // Children of every node at a depth are the same top tokens of U[d-1].
    if (m.sibling_rank[i] == 0) {
      EXPECT_EQ(m.token[i], top1(q));
    }
  }
  const DraftTree l = expand(s, 4, params(DecodeMode::LogQ, 2, 12, 0), Calibration{3, 2}, chooser);
  EXPECT_EQ(l.q_source, QSource::Conditional);
  for (int i = 1; i < l.size(); ++i) EXPECT_NEAR(l.survival[i], l.survival[l.parent[i]] * l.draft_q[i], 1e-6);
}

TEST(Expand, SampledChildrenAreDistinctAndCarryTheirOwnSurvival) {
  const SyntheticDrafter d = SyntheticDrafter::random(6, 3, 2, 10);
  const DraftSource s = d.source();
  const Calibration cal{0.9, 0.5};
  for (uint64_t seed = 0; seed < 50; ++seed) {
    TreeParams t = params(DecodeMode::Tree, 3, 8, 0.05);
    t.temperature = 0.7f;
    RandomChooser chooser(seed);
    const DraftTree tree = expand(s, 5, t, cal, chooser);
    tree.validate(6);
    EXPECT_EQ(tree.draft_temperature, 0.7f);
    for (int i = 0; i < tree.size(); ++i) {
      std::set<int32_t> tokens;
      for (int32_t c : tree.children(i)) EXPECT_TRUE(tokens.insert(tree.token[c]).second) << "a repeated sibling";
    }
    for (int i = 1; i < tree.size(); ++i) {
      EXPECT_GT(tree.draft_q[i], 0);
      EXPECT_NEAR(tree.survival[i], tree.survival[tree.parent[i]] * cal.p_hat(tree.draft_q[i]), 1e-6);
    }
  }
}

TEST(Expand, CostModelShrinksTheTreeTowardTheChain) {
  const SyntheticDrafter d = SyntheticDrafter::random(8, 6, 2, 12, 3, 1);
  const DraftSource s = d.source();
  const std::vector<int> k = {1, 2, 4, 8, 16, 32};
  const RoundCost memory_bound = testing::table_round_cost(k, {10, 10.01, 10.02, 10.05, 10.1, 10.3});  // flat
  const RoundCost compute_bound = testing::table_round_cost(k, {1, 2, 4, 8, 16, 32});  // linear through 0
  const TreeParams t = params(DecodeMode::Tree, 3, 30, 0.01);
  RandomChooser chooser = unused_chooser();
  const DraftTree light = expand(s, 0, t, Calibration{}, chooser, memory_bound);
  const DraftTree heavy = expand(s, 0, t, Calibration{}, chooser, compute_bound);
  EXPECT_GT(light.size(), heavy.size());
  for (int i = 0; i < heavy.size(); ++i) EXPECT_LE(heavy.children(i).size(), 1u) << "heavy load should give a chain";
}

// The whole round decides a greedy tree's size: the adaptive tree is exactly the prefix of the unpriced best-first
// order (theta 0, same caps) with the best expected tokens per ms of round_cost_ms, on a staircase curve where the
// marginal rule alone stops a node before a step that the nodes after it pay for.
TEST(Expand, GreedyTreeIsTheBestPrefixOfTheRoundAcrossCostSteps) {
  const std::vector<int> k = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24};
  const std::vector<double> ms = {10, 10, 10, 10.1, 13, 13, 13, 13.1, 16, 16.2, 19, 25};
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    const SyntheticDrafter d = SyntheticDrafter::random(16, 6, 2, 12 + seed, 3);
    const DraftSource s = d.source();
    for (double node_ms : {0.0, 0.3}) {
      TreeParams unpriced = params(DecodeMode::Tree, 3, 20, 0);
      RandomChooser chooser = unused_chooser();
      const DraftTree order = expand(s, 0, unpriced, Calibration{1.0, 1.0}, chooser);
      int best_size = 1;
      double expected = 1, best_rate = 0;
      for (int size = 1; size <= order.size(); ++size) {
        if (size > 1) expected += order.survival[size - 1];
        const double rate = expected / testing::table_round_cost(k, ms, node_ms)(size);
        if (rate > best_rate) best_rate = rate, best_size = size;
      }
      const DraftTree tree = expand(s, 0, unpriced, Calibration{1.0, 1.0}, chooser, testing::table_round_cost(k, ms, node_ms));
      ASSERT_EQ(tree.size(), best_size) << "seed " << seed << " node_ms " << node_ms;
      for (int i = 0; i < tree.size(); ++i) {
        EXPECT_EQ(tree.token[i], order.token[i]);
        EXPECT_EQ(tree.parent[i], order.parent[i]);
      }
      tree.validate(s.vocab);
    }
  }
}

TEST(DraftFilter, KeepsWhatTheTargetsProcessorsWouldAndRenormalises) {
  const std::vector<float> q = {0.05f, 0.30f, 0.10f, 0.30f, 0.20f, 0.05f};
  auto filtered = [&](DraftFilter f) {
    std::vector<float> out = q;
    apply_draft_filter(f, int(out.size()), out.data());
    return out;
  };
  auto kept = [](const std::vector<float>& v) {
    std::vector<int> k;
    double sum = 0;
    for (int t = 0; t < int(v.size()); ++t) {
      if (v[t] > 0) k.push_back(t);
      sum += v[t];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
    return k;
  };
  EXPECT_EQ(kept(filtered({})), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(filtered({}), q) << "an inactive filter changes nothing";
  EXPECT_EQ(kept(filtered({2, 1, 0})), (std::vector<int>{1, 3}));           // top-2
  EXPECT_EQ(kept(filtered({3, 1, 0})), (std::vector<int>{1, 3, 4}));        // top-3
  EXPECT_EQ(kept(filtered({5, 1, 0})), (std::vector<int>{0, 1, 2, 3, 4, 5}));  // ties with the 5th survive
  EXPECT_EQ(kept(filtered({0, 0.5f, 0})), (std::vector<int>{1, 3}));        // 0.3 + 0.3 reaches 0.5
  EXPECT_EQ(kept(filtered({0, 0.65f, 0})), (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(kept(filtered({0, 1, 0.5f})), (std::vector<int>{1, 3, 4}));     // >= 0.15
  EXPECT_EQ(kept(filtered({3, 0.5f, 0})), (std::vector<int>{1, 3}));        // top-p of what top-k left
  const std::vector<float> two = filtered({2, 1, 0});
  EXPECT_FLOAT_EQ(two[1], 0.5f);
  EXPECT_FLOAT_EQ(two[3], 0.5f);
  EXPECT_THROW(filtered({-1, 1, 0}), Error);
  EXPECT_THROW(filtered({0, 0, 0}), Error);
}

TEST(Expand, RejectsBadParameters) {
  const SyntheticDrafter d = SyntheticDrafter::random(4, 2, 1, 1);
  const DraftSource s = d.source();
  RandomChooser chooser = unused_chooser();
  EXPECT_THROW(expand(s, 0, params(DecodeMode::Tree, 2, 4, -0.1), Calibration{}, chooser), Error);
  EXPECT_THROW(expand(s, 0, params(DecodeMode::Tree, -1, 4, 0), Calibration{}, chooser), Error);
  EXPECT_THROW(expand(s, 4, params(DecodeMode::Tree, 2, 4, 0), Calibration{}, chooser), Error);
  EXPECT_THROW(expand(s, 0, params(DecodeMode::Tree, 2, 4, 0), Calibration{-1, 0}, chooser), Error);
  DraftSource missing = s;
  missing.base_logits = nullptr;
  EXPECT_THROW(expand(missing, 0, params(DecodeMode::Marginal, 2, 4, 0), Calibration{}, chooser), Error);
}

// Expansion's own work (heap, softmax, selection), with a drafter whose logits cost one vocab-sized copy: the
// conditional logits themselves are the drafter's cost, not the expander's.
TEST(Expand, CostOnALargeVocabulary) {
  const int vocab = 8192, block = 7;
  std::vector<float> base(static_cast<size_t>(block) * vocab);  // [block, vocab]
  for (size_t i = 0; i < base.size(); ++i) base[i] = 6 * testing::hashed_uniform(17, i);
  DraftSource s;
  s.vocab = vocab;
  s.block_size = block;
  double logits_ms = 0;  // the drafter's share, subtracted below
  s.conditional_logits = [&](int depth, int32_t parent, float* out) {
    const double start = now_ms();
    const float* u = &base[static_cast<size_t>(depth - 1) * vocab];
    for (int v = 0; v < vocab; ++v) out[v] = u[v] + ((v * 31 + parent) % 97 == 0 ? 2.0f : 0.0f);
    logits_ms += now_ms() - start;
  };
  s.base_logits = [&](int depth, float* out) { std::copy_n(&base[static_cast<size_t>(depth - 1) * vocab], vocab, out); };
  for (float temperature : {0.0f, 1.0f}) {
    TreeParams t = params(DecodeMode::Tree, 4, 32, 0);
    t.temperature = temperature;
    RandomChooser chooser(1);
    const int reps = 20;
    logits_ms = 0;
    const double start = now_ms();
    int nodes = 0;
    for (int r = 0; r < reps; ++r) nodes += expand(s, r, t, Calibration{}, chooser).size() - 1;
    const double per_tree = (now_ms() - start - logits_ms) / reps;
    EXPECT_EQ(nodes, reps * 32);
    std::printf("expand: vocab %d, 32 nodes, branch 4, T=%.0f: %.3f ms per tree excluding the drafter's logits "
                "(%.3f ms)\n", vocab, temperature, per_tree, logits_ms / reps);
    EXPECT_LT(per_tree, 50.0);  // a gross-regression guard only; the figure above is the measurement
  }
}

}  // namespace
}  // namespace ts::spec_decode
