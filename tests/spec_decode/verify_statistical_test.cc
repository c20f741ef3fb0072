// Statistical end to end: N sampled 3-token continuations, each produced by rounds of expand + verify with a
// RandomChooser (fixed seed, so the test is deterministic), against the target's exact distribution over the
// vocab^3 sequences.
//
// The bound. Let p be the exact distribution over K outcomes and p_hat the empirical one from N samples.
//   E|p_hat_i - p_i| <= sqrt(Var p_hat_i) = sqrt(p_i (1 - p_i) / N)   (Jensen), so
//   E[TV] <= B_mean = 0.5 * sum_i sqrt(p_i (1 - p_i) / N).
// TV is a function of N independent samples and changing one sample moves it by at most 1/N, so by McDiarmid
//   P(TV >= E[TV] + t) <= exp(-2 N t^2);  t = sqrt(ln(1/delta) / (2 N)) with delta = 1e-6.
// A correct sampler therefore passes TV <= B_mean + t except with probability 1e-6. With N = 25,000 and K = 64 the
// bound is ~0.03. The bound has power: the same samples are far (TV > bound) from the target at 1.25x the
// temperature without processors, and the peeking admission rule (expand_testing.h) is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "spec_decode/expand.h"
#include "spec_decode/expand_testing.h"
#include "spec_decode/synthetic_pair.h"
#include "spec_decode/verify.h"

namespace ts::spec_decode {
namespace {

using testing::SyntheticDrafter;
using testing::SyntheticTarget;

constexpr int kVocab = 4;
constexpr int kOutcomes = kVocab * kVocab * kVocab;

std::vector<double> exact_three_tokens(const SyntheticTarget& target, const std::vector<int32_t>& prompt,
                                       const SamplingParams& params) {
  std::vector<double> p(kOutcomes, 0);
  const std::vector<double> p1 = target.processed(prompt, params);
  for (int a = 0; a < kVocab; ++a) {
    std::vector<int32_t> ca = prompt;
    ca.push_back(a);
    const std::vector<double> p2 = target.processed(ca, params);
    for (int b = 0; b < kVocab; ++b) {
      std::vector<int32_t> cb = ca;
      cb.push_back(b);
      const std::vector<double> p3 = target.processed(cb, params);
      for (int c = 0; c < kVocab; ++c) p[(a * kVocab + b) * kVocab + c] = p1[a] * p2[b] * p3[c];
    }
  }
  return p;
}

// Empirical distribution of the first 3 tokens over n samples of multi-round speculative decoding.
std::vector<double> sample_three_tokens(const SyntheticTarget& target, const std::vector<int32_t>& prompt,
                                        const SamplingParams& params, const TreeParams& tree_params, int n,
                                        uint64_t seed, double* mean_accepted,
                                        const std::function<bool(double)>& keep_draw = nullptr) {
  SyntheticDrafter drafter = SyntheticDrafter::random(kVocab, 3, 2, seed + 1);
  RandomChooser chooser(seed);
  std::vector<double> counts(kOutcomes, 0);
  int64_t rounds = 0, accepted = 0;
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> context = prompt;
    while (context.size() < prompt.size() + 3) {
      drafter.inform(target, context, 1.0f, 1.5f);
      const DraftSource source = drafter.source();
      const DraftTree tree =
          keep_draw ? expand_peeking_at_draws(source, context.back(), tree_params, Calibration{1.2, 0.1}, chooser,
                                              keep_draw)
                    : expand(source, context.back(), tree_params, Calibration{1.2, 0.1}, chooser);
      const std::vector<float> rows = testing::tree_target_logits(target, context, tree);
      const VerifyResult r = verify(tree, rows.data(), params, source, chooser);
      context.insert(context.end(), r.emitted.begin(), r.emitted.end());
      accepted += static_cast<int64_t>(r.accepted_nodes.size());
      ++rounds;
    }
    const size_t i = prompt.size();
    ++counts[(context[i] * kVocab + context[i + 1]) * kVocab + context[i + 2]];
  }
  for (double& c : counts) c /= n;
  *mean_accepted = static_cast<double>(accepted) / rounds;
  return counts;
}

double tv_bound(const std::vector<double>& p, int n) {
  double mean = 0;
  for (double v : p) mean += 0.5 * std::sqrt(v * (1 - v) / n);
  return mean + std::sqrt(std::log(1e6) / (2.0 * n));
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - b[i]);
  return s / 2;
}

void check(const SamplingParams& params, const TreeParams& tree, uint64_t seed, const char* name) {
  SyntheticTarget target;
  target.vocab = kVocab;
  target.scale = 2.0f;
  target.salt = seed;
  const std::vector<int32_t> prompt = {1, 3};
  const int n = 25000;
  double mean_accepted = 0;
  const std::vector<double> got = sample_three_tokens(target, prompt, params, tree, n, seed, &mean_accepted);
  const std::vector<double> want = exact_three_tokens(target, prompt, params);
  const double tv = total_variation(got, want);
  const double bound = tv_bound(want, n);
  std::printf("%s: N=%d TV=%.4f bound=%.4f accepted draft tokens/round=%.2f\n", name, n, tv, bound, mean_accepted);
  EXPECT_LT(tv, bound) << name;
  EXPECT_GT(mean_accepted, 0.3) << name << ": drafts were rarely accepted";
  // Power: a nearby but different distribution must be rejected by the same bound.
  SamplingParams unprocessed;
  unprocessed.temperature = params.temperature * 1.25f;
  const double tv_other = total_variation(got, exact_three_tokens(target, prompt, unprocessed));
  std::printf("%s: TV to the target at 1.25x temperature without processors %.4f\n", name, tv_other);
  EXPECT_GT(tv_other, bound) << name;
}

TEST(VerifyStatistical, TreeAtTemperatureOne) {
  SamplingParams params;
  params.temperature = 1.0f;
  TreeParams tree;
  tree.branch_cap = 2;
  tree.node_cap = 4;
  tree.theta = 0.05;
  tree.temperature = 1.0f;
  check(params, tree, 3, "tree T=1");
}

TEST(VerifyStatistical, TreeWithProcessorsAndAnotherDraftTemperature) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 3;
  params.top_p = 0.9f;
  params.min_p = 0.05f;
  TreeParams tree;
  tree.branch_cap = 3;
  tree.node_cap = 6;
  tree.theta = 0;
  tree.temperature = 1.3f;
  check(params, tree, 4, "tree T=0.8 top-k/p, min-p, draft T=1.3");
}

// Negative control: the peeking admission rule (expand_testing.h) must be caught by this statistical test as well.
TEST(VerifyStatistical, PeekingAdmissionIsDetected) {
  SyntheticTarget target;
  target.vocab = kVocab;
  target.scale = 2.0f;
  target.salt = 3;
  const std::vector<int32_t> prompt = {1, 3};
  SamplingParams params;
  params.temperature = 1.0f;
  TreeParams tree;
  tree.branch_cap = 2;
  tree.node_cap = 4;
  tree.theta = 0;
  tree.temperature = 1.0f;
  const auto peeking = [](double drawn_q) { return drawn_q > 0.3; };
  const int n = 25000;
  double mean_accepted = 0;
  const std::vector<double> got = sample_three_tokens(target, prompt, params, tree, n, 3, &mean_accepted, peeking);
  const std::vector<double> want = exact_three_tokens(target, prompt, params);
  const double tv = total_variation(got, want);
  std::printf("peeking admission: TV=%.4f bound=%.4f\n", tv, tv_bound(want, n));
  EXPECT_GT(tv, tv_bound(want, n));
}

}  // namespace
}  // namespace ts::spec_decode
