// The recursive-rejection rule on hand-computed cases: the coins offered to the Chooser and the residual.
#include <gtest/gtest.h>

#include <cmath>

#include "spec_decode/scripted_chooser.h"
#include "spec_decode/verify.h"

namespace ts::spec_decode {
namespace {

using testing::ScriptedChooser;

// A drafter whose q is fixed: log-probabilities as logits, so q = softmax(logits) = probs at temperature 1.
DraftSource fixed_q(std::vector<float> q) {
  DraftSource s;
  s.vocab = static_cast<int>(q.size());
  s.block_size = 2;
  s.conditional_logits = [q](int, int32_t, float* out) {
    for (size_t i = 0; i < q.size(); ++i) out[i] = std::log(q[i]);
  };
  s.base_logits = [q](int, float* out) {
    for (size_t i = 0; i < q.size(); ++i) out[i] = std::log(q[i]);
  };
  return s;
}

std::vector<float> log_rows(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) {
    for (float v : r) out.push_back(std::log(v));
  }
  return out;
}

// q = (0.8, 0.2), p = (0.5, 0.5), one sampled child x = 0: accept with 0.5 / 0.8 = 0.625; on rejection the residual
// max(p - q, 0) = (0, 0.3) normalises to (0, 1), so the bonus is 1 for sure.
TEST(VerifyRule, OneChildAcceptRatioAndResidual) {
  const DraftSource source = fixed_q({0.8f, 0.2f});
  DraftTree tree;
  tree.draft_temperature = 1;
  tree.add(1, -1, 0, 1, 1);
  tree.add(0, 0, 0, 0.8, 0.8f);
  const std::vector<float> rows = log_rows({{0.5f, 0.5f}, {0.25f, 0.75f}});
  SamplingParams params;
  params.temperature = 1;
  ScriptedChooser chooser;
  double p_accept_then_1 = 0, p_reject = 0, total = 0;
  do {
    const VerifyResult r = verify(tree, rows.data(), params, source, chooser);
    if (r.accepted_nodes.size() == 1) {
      EXPECT_EQ(r.emitted[0], 0);
      if (r.bonus_token == 1) p_accept_then_1 += chooser.probability();
    } else {
      EXPECT_EQ(r.emitted, (std::vector<int32_t>{1}));  // the residual puts all mass on 1
      p_reject += chooser.probability();
    }
    total += chooser.probability();
  } while (chooser.next());
  EXPECT_NEAR(total, 1, 1e-12);
  EXPECT_NEAR(p_reject, 0.375, 1e-6);
  EXPECT_NEAR(p_accept_then_1, 0.625 * 0.75, 1e-6);
}

// Two sampled siblings 0 then 2 from q = (0.5, 0.3, 0.2), with p = (0.2, 0.5, 0.3) at the root:
//   c1 = 0: accept 0.2 / 0.5 = 0.4; residual max(p - q, 0) = (0, 0.2, 0.1) -> (0, 2/3, 1/3).
//   c2 = 2 was drawn from q_2 = (0.5, 0.3, 0.2) without 0 = (0, 0.6, 0.4): accept (1/3) / 0.4 = 5/6 (with q instead
//   of q_2 the ratio would be (1/3) / 0.2 > 1); residual max((0, 2/3, 1/3) - q_2, 0) = (0, 1/15, 0) -> bonus 1.
// So, given this tree: first token 0 w.p. 0.4, 2 w.p. 0.6 * 5/6 = 0.5, 1 w.p. 0.6 * 1/6 = 0.1.
TEST(VerifyRule, SecondSiblingUsesTheWithoutReplacementQ) {
  const DraftSource source = fixed_q({0.5f, 0.3f, 0.2f});
  DraftTree tree;
  tree.draft_temperature = 1;
  tree.add(1, -1, 0, 1, 1);
  tree.add(0, 0, 0, 0.5, 0.5f);
  tree.add(2, 0, 1, 0.2, 0.2f);
  const std::vector<float> rows = log_rows({{0.2f, 0.5f, 0.3f}, {0.3f, 0.3f, 0.4f}, {0.3f, 0.3f, 0.4f}});
  SamplingParams params;
  params.temperature = 1;
  ScriptedChooser chooser;
  double first[3] = {0, 0, 0};
  do {
    const VerifyResult r = verify(tree, rows.data(), params, source, chooser);
    first[r.emitted[0]] += chooser.probability();
  } while (chooser.next());
  EXPECT_NEAR(first[0], 0.4, 1e-6);
  EXPECT_NEAR(first[1], 0.1, 1e-6);
  EXPECT_NEAR(first[2], 0.5, 1e-6);
}

// A greedily drafted tree (draft temperature 0) verified at temperature 1: q_j is the point mass on c_j, so c_j is
// accepted with probability p(c_j) and the residual is p without c_j.
TEST(VerifyRule, DeterministicDraftsUsePointMasses) {
  const DraftSource source = fixed_q({0.5f, 0.3f, 0.2f});
  DraftTree tree;
  tree.draft_temperature = 0;
  tree.add(1, -1, 0, 1, 1);
  tree.add(0, 0, 0, 0.5, 0.5f);
  tree.add(1, 0, 1, 0.3, 0.3f);
  const std::vector<float> rows = log_rows({{0.2f, 0.5f, 0.3f}, {0.3f, 0.3f, 0.4f}, {0.3f, 0.3f, 0.4f}});
  SamplingParams params;
  params.temperature = 1;
  ScriptedChooser chooser;
  double first[3] = {0, 0, 0};
  do {
    const VerifyResult r = verify(tree, rows.data(), params, source, chooser);
    first[r.emitted[0]] += chooser.probability();
  } while (chooser.next());
  // c1 = 0 accepted w.p. 0.2; then p' = (0, 0.625, 0.375); c2 = 1 accepted w.p. 0.625; else bonus 2.
  EXPECT_NEAR(first[0], 0.2, 1e-6);
  EXPECT_NEAR(first[1], 0.8 * 0.625, 1e-6);
  EXPECT_NEAR(first[2], 0.8 * 0.375, 1e-6);
}

}  // namespace
}  // namespace ts::spec_decode
