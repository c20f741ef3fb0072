// Exact losslessness: enumerate every outcome of one round (every without-replacement draft draw, every
// accept/reject coin, every bonus draw) with its probability, and compare the distribution of the first emitted
// token and of the first two emitted tokens with the target's own, computed independently from the synthetic
// target. A round that emits one token is extended with the target's exact distribution at the next position.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/error.h"
#include "sampling/penalties.h"
#include "spec_decode/expand.h"
#include "spec_decode/expand_testing.h"
#include "spec_decode/scripted_chooser.h"
#include "spec_decode/synthetic_pair.h"
#include "spec_decode/verify.h"

namespace ts::spec_decode {
namespace {

using testing::PenalizedTarget;
using testing::ScriptedChooser;
using testing::SyntheticDrafter;
using testing::SyntheticTarget;

struct ExactCase {
  SamplingParams target;      // the request's processors
  float draft_temperature;    // usually target.temperature; any value is lossless
  TreeParams tree;
  Calibration calibration;
  RoundCost round_cost;                   // set: the round is priced (load-adaptive expansion)
  std::function<bool(double)> keep_draw;  // set: the lossy negative control (expand_testing.h)
};

struct Distributions {
  std::vector<double> first;   // [vocab]
  std::vector<double> pair;    // [vocab, vocab]
  double total = 0;            // sum of outcome probabilities (must be 1)
  int64_t outcomes = 0;
  double mean_nodes = 0;       // expected number of tree nodes (root excluded)
};

// The verify() input for a tree: [n, vocab]. Unset: testing::tree_target_logits of the target itself.
using TreeRows = std::function<std::vector<float>(const DraftTree&)>;

// Runs expand + verify under the enumerating chooser. Target: SyntheticTarget, EditedTarget or PenalizedTarget (the
// reference the emitted distributions are checked against); rows_of, when set, computes the rows verify() reads.
template <class Target>
Distributions enumerate_round(const Target& target, const DraftSource& source, const std::vector<int32_t>& context,
                              const ExactCase& c, const TreeRows& rows_of = nullptr) {
  const int vocab = target.vocab;
  TreeParams tree_params = c.tree;
  tree_params.temperature = c.draft_temperature;
  Distributions d;
  d.first.assign(vocab, 0);
  d.pair.assign(vocab * vocab, 0);
  ScriptedChooser chooser;
  do {
    const DraftTree tree = c.keep_draw ? expand_peeking_at_draws(source, context.back(), tree_params, c.calibration,
                                                                  chooser, c.keep_draw)
                                       : expand(source, context.back(), tree_params, c.calibration, chooser,
                                                c.round_cost);
    const std::vector<float> rows = rows_of ? rows_of(tree) : testing::tree_target_logits(target, context, tree);
    const VerifyResult r = verify(tree, rows.data(), c.target, source, chooser);
    const double w = chooser.probability();
    const int32_t x = r.emitted[0];
    d.first[x] += w;
    if (r.emitted.size() >= 2) {
      d.pair[x * vocab + r.emitted[1]] += w;
    } else {
      std::vector<int32_t> next = context;
      next.push_back(x);
      const std::vector<double> p_next = target.processed(next, c.target);
      for (int y = 0; y < vocab; ++y) d.pair[x * vocab + y] += w * p_next[y];
    }
    d.total += w;
    d.mean_nodes += w * (tree.size() - 1);
    ++d.outcomes;
  } while (chooser.next());
  return d;
}

// The target's exact first-token and pair distributions.
template <class Target>
Distributions exact_target(const Target& target, const std::vector<int32_t>& context, const SamplingParams& params) {
  const int vocab = target.vocab;
  Distributions d;
  d.first = target.processed(context, params);
  d.pair.assign(vocab * vocab, 0);
  for (int x = 0; x < vocab; ++x) {
    std::vector<int32_t> next = context;
    next.push_back(x);
    const std::vector<double> p_next = target.processed(next, params);
    for (int y = 0; y < vocab; ++y) d.pair[x * vocab + y] = d.first[x] * p_next[y];
  }
  d.total = 1;
  return d;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - b[i]);
  return s / 2;
}

std::string describe(const ExactCase& c) {
  return cat("T=", c.target.temperature, " top_k=", c.target.top_k, " top_p=", c.target.top_p, " min_p=",
             c.target.min_p, " draftT=", c.draft_temperature, " mode=", static_cast<int>(c.tree.mode), " branch=",
             c.tree.branch_cap, " nodes=", c.tree.node_cap, " theta=", c.tree.theta, " a=", c.calibration.a,
             " b=", c.calibration.b);
}

TreeParams shape(DecodeMode mode, int branch_cap, int node_cap, double theta, int draft_len = 3) {
  TreeParams t;
  t.mode = mode;
  t.branch_cap = branch_cap;
  t.node_cap = node_cap;
  t.theta = theta;
  t.draft_len = draft_len;
  return t;
}

SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1, float min_p = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// Returns the expected tree size, so that callers can check the case exercised real trees.
double expect_exact(const ExactCase& c, int vocab, uint64_t seed) {
  SyntheticTarget target;
  target.vocab = vocab;
  target.salt = seed;
  const SyntheticDrafter drafter = SyntheticDrafter::random(vocab, 3, 2, seed * 31 + 7);
  const std::vector<int32_t> context = {static_cast<int32_t>(seed % vocab), 1, 0};
  const Distributions got = enumerate_round(target, drafter.source(), context, c);
  const Distributions want = exact_target(target, context, c.target);
  EXPECT_NEAR(got.total, 1.0, 1e-12) << describe(c);
  EXPECT_LT(max_abs_diff(got.first, want.first), 1e-9) << describe(c) << " seed " << seed;
  EXPECT_LT(max_abs_diff(got.pair, want.pair), 1e-9) << describe(c) << " seed " << seed;
  EXPECT_GT(got.outcomes, 1) << describe(c) << ": the case drew no tree";
  return got.mean_nodes;
}

// Temperatures with and without processors, tree shapes from a single node to 6 nodes with up to 3 siblings.
TEST(VerifyExact, TreesAcrossTemperaturesProcessorsAndShapes) {
  const SamplingParams targets[] = {sampling(0.5f), sampling(1.0f), sampling(1.5f), sampling(1.0f, 3),
                                    sampling(1.0f, 0, 0.8f), sampling(0.5f, 0, 1, 0.2f), sampling(1.5f, 4, 0.9f, 0.05f)};
  const TreeParams shapes[] = {shape(DecodeMode::Tree, 1, 1, 0),   shape(DecodeMode::Tree, 2, 3, 0),
                               shape(DecodeMode::Tree, 3, 4, 0),   shape(DecodeMode::Tree, 3, 6, 0.02),
                               shape(DecodeMode::Tree, 2, 5, 0.2), shape(DecodeMode::Tree, 3, 6, 0.35)};
  for (const SamplingParams& target : targets) {
    for (const TreeParams& tree : shapes) {
      const ExactCase c{target, target.temperature, tree, Calibration{1.3, 0.4}};
      expect_exact(c, 5, 3);
    }
  }
}

TEST(VerifyExact, EveryModeAndCalibration) {
  const SamplingParams target = sampling(1.0f, 0, 0.9f);
  const TreeParams shapes[] = {shape(DecodeMode::Chain, 1, 0, 0, 3), shape(DecodeMode::Marginal, 2, 4, 0),
                               shape(DecodeMode::LogQ, 2, 4, 0.05), shape(DecodeMode::Tree, 2, 4, 0.1)};
  Calibration ranked{1.2, 0.5};  // later siblings priced lower, as a fit on sampled trees gives
  ranked.rank_offset[1] = -1.5;
  ranked.rank_offset[2] = -2.5;
  ranked.rank_offset[3] = 0.7;
  Calibration deep = ranked;  // and deeper children priced lower (or higher) by their depth
  deep.depth_offset[1] = -1.0;
  deep.depth_offset[2] = 0.8;
  deep.depth_offset[3] = -2.0;
  const Calibration calibrations[] = {Calibration{}, Calibration{0.5, -1}, Calibration{2.5, 1.0}, ranked, deep};
  for (const TreeParams& tree : shapes) {
    for (const Calibration& cal : calibrations) expect_exact(ExactCase{target, 1.0f, tree, cal}, 6, 11);
  }
}

// The load-adaptive threshold depends on the survivals of draws already made (never on the draw it admits):
// still exact.
TEST(VerifyExact, LoadAdaptiveThetaStaysExact) {
  // The threshold rises with the tree and with its expected tokens.
  const RoundCost cost = testing::table_round_cost({1, 2, 3, 4, 8}, {1.0, 1.05, 1.15, 1.3, 2.5});
  for (float t : {0.5f, 1.0f}) {
    const TreeParams tree = shape(DecodeMode::Tree, 3, 6, 0);
    ExactCase c{sampling(t, 0, 0.95f), t, tree, Calibration{1.5, 0.5}};
    c.round_cost = cost;
    const double nodes = expect_exact(c, 5, 13);
    EXPECT_GT(nodes, 1.5);
    EXPECT_LT(nodes, 5.5) << "the adaptive threshold rarely stopped a tree";
    std::printf("load-adaptive theta, T=%.1f: %.2f nodes expected\n", t, nodes);
  }
}

// The round-level rule looks past a step of the cost curve (and prices per-node work); greedy drafts are then cut to
// their best prefix. Both read only bounds known before each draw: exact at every draft temperature.
TEST(VerifyExact, RoundLevelTreeChoiceAcrossACostStepStaysExact) {
  // A staircase: the 3rd node costs a step, the next ones little; 0.01 ms of work per node on top.
  const RoundCost cost =
      testing::table_round_cost({1, 2, 3, 4, 5, 6, 8}, {1.0, 1.0, 1.0, 1.6, 1.6, 1.62, 1.65}, 0.01);
  for (float draft_t : {0.0f, 0.5f, 1.0f}) {
    const TreeParams tree = shape(DecodeMode::Tree, 3, 6, 0);
    ExactCase c{sampling(1.0f, 0, 0.95f), draft_t, tree, Calibration{1.5, 0.5}};
    c.round_cost = cost;
    const double nodes = expect_exact(c, 5, 17);
    EXPECT_GT(nodes, 1.0) << "draft T " << draft_t;
    std::printf("round-level choice, draft T=%.1f: %.2f nodes expected\n", draft_t, nodes);
  }
}

// The drafter's q may differ from p in any way (temperature, a greedy top-q draft): still exact.
TEST(VerifyExact, DraftTemperatureDiffersFromTarget) {
  const TreeParams tree = shape(DecodeMode::Tree, 2, 4, 0);
  for (float draft_t : {0.0f, 0.3f, 2.0f}) {
    expect_exact(ExactCase{sampling(1.0f), draft_t, tree, Calibration{}}, 6, 5);
    expect_exact(ExactCase{sampling(0.7f, 3, 0.95f), draft_t, tree, Calibration{}}, 6, 6);
  }
}

// Sampled drafts filtered by the request's top-k / top-p / min-p (or by others): still exact, with trees whose
// parents have fewer tokens left than branch_cap, and with the filter differing from the target's processors.
TEST(VerifyExact, DraftFilterStaysExact) {
  const DraftFilter filters[] = {{2, 1, 0}, {0, 0.7f, 0}, {0, 1, 0.3f}, {3, 0.8f, 0.1f}, {1, 1, 0}};
  const SamplingParams targets[] = {sampling(1.0f), sampling(0.7f, 3, 0.9f), sampling(1.2f, 0, 0.8f, 0.05f)};
  for (const DraftFilter& f : filters) {
    for (const SamplingParams& target : targets) {
      for (TreeParams tree : {shape(DecodeMode::Tree, 3, 5, 0), shape(DecodeMode::Chain, 1, 0, 0, 3),
                              shape(DecodeMode::Marginal, 2, 4, 0)}) {
        tree.filter = f;
        expect_exact(ExactCase{target, target.temperature, tree, Calibration{1.2, 0.3}}, 6, 17);
      }
    }
  }
}

// Several random pairs and tiny vocabularies, including the full 8.
TEST(VerifyExact, RandomPairsAndVocabularies) {
  for (uint64_t seed = 20; seed < 24; ++seed) {
    expect_exact(ExactCase{sampling(1.0f), 1.0f, shape(DecodeMode::Tree, 2, 3, 0), Calibration{}}, 8, seed);
    expect_exact(ExactCase{sampling(1.5f, 0, 0.7f), 1.5f, shape(DecodeMode::Tree, 3, 4, 0.01), Calibration{}}, 4,
                 seed);
  }
}

// The target equal to the drafter (p == q at every node): acceptance is 1 up to rounding; the degenerate-residual
// guard must keep the result exact and free of NaN.
TEST(VerifyExact, TargetEqualToDrafterHitsNoNan) {
  const int vocab = 5;
  const SyntheticDrafter drafter = SyntheticDrafter::random(vocab, 3, 2, 99);
  const DraftSource source = drafter.source();
  const std::vector<int32_t> context = {2};
  ScriptedChooser chooser;
  TreeParams tree_params = shape(DecodeMode::Tree, 2, 3, 0);
  tree_params.temperature = 1;
  std::vector<double> first(vocab, 0);
  do {
    const DraftTree tree = expand(source, context.back(), tree_params, Calibration{}, chooser);
    std::vector<float> rows(tree.size() * vocab);  // [n, vocab]: each node's target = the drafter's conditional
    for (int i = 0; i < tree.size(); ++i) {
      if (tree.depth[i] < drafter.block_size) source.conditional_logits(tree.depth[i] + 1, tree.token[i], &rows[i * vocab]);
    }
    const VerifyResult r = verify(tree, rows.data(), sampling(1.0f), source, chooser);
    for (int32_t t : r.emitted) ASSERT_TRUE(t >= 0 && t < vocab);
    first[r.emitted[0]] += chooser.probability();
  } while (chooser.next());
  std::vector<float> root_logits(vocab);
  source.conditional_logits(1, context.back(), root_logits.data());
  std::vector<double> want;
  processed_distribution(root_logits.data(), vocab, sampling(1.0f), &want);
  EXPECT_LT(max_abs_diff(first, want), 1e-9);
}

// A request's logit edits as the engine applies them (request.h: logit_bias, min_tokens): bias added, stop ids at
// -inf while the predicted token's number is below min_tokens. The row after `context` predicts token number
// first_index + (context.size() - base_length), so inside a round the mask depends on the node's depth.
struct EditedTarget {
  SyntheticTarget raw;
  int vocab = 0;
  std::vector<std::pair<int32_t, float>> bias;
  std::vector<int32_t> stop_ids;
  int min_tokens = 0;
  size_t base_length = 0;  // the round's context (ending with the anchor)
  int first_index = 0;     // number of the token the root row predicts

  void edit(int token_index, float* out) const {  // out: [vocab]
    for (const auto& [id, add] : bias) out[id] += add;
    if (token_index < min_tokens)
      for (int32_t id : stop_ids) out[id] = -std::numeric_limits<float>::infinity();
  }
  void logits(const std::vector<int32_t>& context, float* out) const {
    raw.logits(context, out);
    edit(first_index + int(context.size() - base_length), out);
  }
  std::vector<double> processed(const std::vector<int32_t>& context, const SamplingParams& params) const {
    std::vector<float> row(vocab);
    logits(context, row.data());
    std::vector<double> p;
    processed_distribution(row.data(), vocab, params, &p);
    return p;
  }
  // The drafter's q edited alike: a child at depth d is token number first_index + d - 1.
  DraftSource edited(const DraftSource& inner) const {
    DraftSource s = inner;
    s.conditional_logits = [this, inner](int depth, int32_t parent, float* out) {
      inner.conditional_logits(depth, parent, out);
      edit(first_index + depth - 1, out);
    };
    s.base_logits = [this, inner](int depth, float* out) {
      inner.base_logits(depth, out);
      edit(first_index + depth - 1, out);
    };
    return s;
  }
};

// Logit bias and a min_tokens mask that ends inside the tree (root row masked, deeper rows not, or the first two
// masked), on p and on q: the round still emits exactly the edited target's first and pair distributions, for
// sampled and greedy drafts and in every mode.
TEST(VerifyExact, LogitBiasAndMinTokensMaskAtDepthStayExact) {
  const int vocab = 6;
  const SyntheticDrafter drafter = SyntheticDrafter::random(vocab, 3, 2, 41);
  const std::vector<int32_t> context = {4, 1, 0};
  const SamplingParams targets[] = {sampling(1.0f), sampling(0.8f, 4, 0.95f)};
  for (int min_tokens : {0, 1, 2}) {
    EditedTarget target;
    target.raw.vocab = target.vocab = vocab;
    target.raw.salt = 41;
    target.bias = {{2, 1.5f}, {5, -2.0f}, {0, 0.7f}};
    target.stop_ids = {2, 3};
    target.min_tokens = min_tokens;
    target.base_length = context.size();
    target.first_index = 0;
    const DraftSource source = target.edited(drafter.source());
    for (const SamplingParams& p : targets) {
      for (float draft_t : {p.temperature, 0.0f}) {
        for (const TreeParams& tree : {shape(DecodeMode::Tree, 3, 6, 0), shape(DecodeMode::Chain, 1, 0, 0, 3),
                                       shape(DecodeMode::Marginal, 2, 4, 0)}) {
          const ExactCase c{p, draft_t, tree, Calibration{1.2, 0.3}};
          const Distributions got = enumerate_round(target, source, context, c);
          const Distributions want = exact_target(target, context, p);
          EXPECT_NEAR(got.total, 1.0, 1e-12);
          EXPECT_LT(max_abs_diff(got.first, want.first), 1e-9) << describe(c) << " min_tokens " << min_tokens;
          EXPECT_LT(max_abs_diff(got.pair, want.pair), 1e-9) << describe(c) << " min_tokens " << min_tokens;
          if (min_tokens >= 1) {
            EXPECT_EQ(want.first[2] + want.first[3], 0.0);  // masked at the root
          }
          if (min_tokens == 1) {  // allowed one token deeper
            double stop_second = 0;
            for (int x = 0; x < vocab; ++x) stop_second += want.pair[x * vocab + 2] + want.pair[x * vocab + 3];
            EXPECT_GT(stop_second, 0.05);
          }
          EXPECT_GT(got.mean_nodes, 0.5) << describe(c);
        }
      }
    }
  }
}

// Sampling penalties as the engine applies them (sampling/penalties.h): each tree row is the raw row penalized with
// the generated counts plus the draft tokens on its own path (PenaltyHistory::apply_to_tree), q with the generated
// counts only. The reference (PenalizedTarget) counts everything after the prompt in the row's context, so the
// target's processed distribution at each node depends on the node's path. Exact in tree, chain and marginal
// modes, for sampled and greedy drafts and targets; rows that ignore the path (a negative control) are not.
TEST(VerifyExact, PathDependentPenaltiesStayExact) {
  const int vocab = 6;
  const SyntheticDrafter drafter = SyntheticDrafter::random(vocab, 3, 2, 43);
  const std::vector<int32_t> prompt = {4, 1}, generated = {0, 3, 0};  // the anchor is the last generated token
  std::vector<int32_t> context = prompt;
  context.insert(context.end(), generated.begin(), generated.end());
  const PenaltyParams penalties[] = {{0.6f, 1.2f, 1}, {0, 0, 1.8f}, {-0.8f, -0.7f, 0.5f}, {0.5f, 0.9f, 1.6f}};
  const SamplingParams targets[] = {sampling(1.0f), sampling(0.8f, 4, 0.95f), sampling(0.0f)};
  for (const PenaltyParams& pp : penalties) {
    PenalizedTarget target;
    target.raw.vocab = target.vocab = vocab;
    target.raw.salt = 43;
    target.presence = pp.presence;
    target.frequency = pp.frequency;
    target.repetition = pp.repetition;
    target.prompt_length = prompt.size();
    PenaltyHistory history(pp, prompt);
    for (int32_t t : generated) history.add_generated(t);
    const DraftSource inner = drafter.source();
    DraftSource source = inner;
    source.base_logits = [&history, inner, vocab](int depth, float* out) {
      inner.base_logits(depth, out);
      history.apply(nullptr, 0, vocab, out);
    };
    source.conditional_logits = [&history, inner, vocab](int depth, int32_t parent, float* out) {
      inner.conditional_logits(depth, parent, out);
      history.apply(nullptr, 0, vocab, out);
    };
    auto rows_with_paths = [&](const DraftTree& tree) {
      std::vector<float> rows = testing::tree_target_logits(target.raw, context, tree);  // [n, vocab]
      history.apply_to_tree(tree.token.data(), tree.parent.data(), tree.size(), vocab, rows.data());
      return rows;
    };
    auto rows_ignoring_paths = [&](const DraftTree& tree) {
      std::vector<float> rows = testing::tree_target_logits(target.raw, context, tree);  // [n, vocab]
      for (int i = 0; i < tree.size(); ++i) history.apply(nullptr, 0, vocab, &rows[size_t(i) * vocab]);
      return rows;
    };
    const std::string what = cat("penalties presence ", pp.presence, " frequency ", pp.frequency, " repetition ",
                                 pp.repetition);
    for (const SamplingParams& p : targets) {
      for (float draft_t : {p.temperature > 0 ? p.temperature : 1.0f, 0.0f}) {
        for (const TreeParams& tree : {shape(DecodeMode::Tree, 3, 6, 0), shape(DecodeMode::Chain, 1, 0, 0, 3),
                                       shape(DecodeMode::Marginal, 2, 4, 0)}) {
          const ExactCase c{p, draft_t, tree, Calibration{1.2, 0.3}};
          const Distributions got = enumerate_round(target, source, context, c, rows_with_paths);
          const Distributions want = exact_target(target, context, p);
          EXPECT_NEAR(got.total, 1.0, 1e-12);
          EXPECT_LT(max_abs_diff(got.first, want.first), 1e-9) << describe(c) << " " << what;
          EXPECT_LT(max_abs_diff(got.pair, want.pair), 1e-9) << describe(c) << " " << what;
          EXPECT_GT(got.mean_nodes, 0.5) << describe(c);
        }
      }
    }
    // The negative control: the same rounds with every row penalized as the root is (the path ignored).
    const ExactCase c{sampling(1.0f), 1.0f, shape(DecodeMode::Tree, 3, 6, 0), Calibration{1.2, 0.3}};
    const Distributions blind = enumerate_round(target, source, context, c, rows_ignoring_paths);
    const Distributions want = exact_target(target, context, c.target);
    EXPECT_GT(max_abs_diff(blind.pair, want.pair), 1e-3) << what << ": rows that ignore the path went undetected";
  }
}

// Negative control: admit a sampled child only if its drawn q is large (peeking at the draw). The same exact test
// must see the distortion (docs/verification.md, rule 1).
TEST(VerifyExact, PeekingAdmissionFailsTheExactTest) {
  SyntheticTarget target;
  target.vocab = 5;
  target.salt = 3;
  const SyntheticDrafter drafter = SyntheticDrafter::random(5, 3, 2, 3 * 31 + 7);
  const std::vector<int32_t> context = {3, 1, 0};
  ExactCase c{sampling(1.0f), 1.0f, shape(DecodeMode::Tree, 2, 4, 0), Calibration{}};
  const Distributions honest = enumerate_round(target, drafter.source(), context, c);
  c.keep_draw = [](double drawn_q) { return drawn_q > 0.25; };
  const Distributions peeking = enumerate_round(target, drafter.source(), context, c);
  const Distributions want = exact_target(target, context, c.target);
  EXPECT_LT(total_variation(honest.first, want.first), 1e-9);
  EXPECT_NEAR(peeking.total, 1.0, 1e-12);
  const double tv = std::max(total_variation(peeking.first, want.first), total_variation(peeking.pair, want.pair));
  EXPECT_GT(tv, 1e-3) << "the peeking rule went undetected";
}

}  // namespace
}  // namespace ts::spec_decode
