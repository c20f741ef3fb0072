// The sampling penalties (penalties.h) against a written-out reference: counts of the generated tokens (path
// included), the set of prompt and generated tokens, the formulas of vLLM (repetition: divide a positive logit,
// multiply a negative one) and OpenAI (frequency * count + presence), in that order. Also: a tree row equals the
// plain row after its path was generated, bit for bit; neutral penalties touch nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "sampling/penalties.h"

namespace ts {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Written out independently of penalties.cc: dense over the vocabulary. logits: [vocab]
std::vector<float> reference(std::vector<float> logits, const PenaltyParams& p, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& generated_and_path) {
  std::map<int32_t, int> count;
  for (int32_t t : generated_and_path) ++count[t];
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  for (int32_t t : generated_and_path) seen.insert(t);
  for (int t = 0; t < int(logits.size()); ++t) {
    if (seen.count(t)) {
      if (logits[t] > 0) {
        logits[t] /= p.repetition;
      } else {
        logits[t] *= p.repetition;
      }
    }
    const int c = count.count(t) ? count[t] : 0;
    logits[t] -= p.frequency * float(c);
    logits[t] -= c > 0 ? p.presence : 0.0f;
  }
  return logits;
}

PenaltyHistory history_of(const PenaltyParams& p, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& generated) {
  PenaltyHistory h(p, prompt);
  for (int32_t t : generated) h.add_generated(t);
  return h;
}

TEST(Penalties, HandComputedRowWithAndWithoutAPath) {
  const PenaltyParams p{/*presence=*/0.25f, /*frequency=*/0.5f, /*repetition=*/2.0f};
  const std::vector<int32_t> prompt = {0, 1}, generated = {2, 2, 3};
  const PenaltyHistory h = history_of(p, prompt, generated);
  std::vector<float> row = {2.0f, -2.0f, 0.5f, -1.0f, 3.0f, 1.0f};
  h.apply(nullptr, 0, 6, row.data());
  // prompt-only tokens: repetition alone, both signs; generated tokens: repetition, then counts.
  EXPECT_EQ(row, (std::vector<float>{1.0f, -4.0f, 0.25f - 1.0f - 0.25f, -2.0f - 0.5f - 0.25f, 3.0f, 1.0f}));
  const int32_t path[] = {4, 2};  // token 4 generated once on the path, token 2 a third time
  row = {2.0f, -2.0f, 0.5f, -1.0f, 3.0f, 1.0f};
  h.apply(path, 2, 6, row.data());
  EXPECT_EQ(row, (std::vector<float>{1.0f, -4.0f, 0.25f - 1.5f - 0.25f, -2.75f, 1.5f - 0.5f - 0.25f, 1.0f}));
  EXPECT_EQ(h.generated_count(2), 2);
  EXPECT_EQ(h.generated_count(0), 0);
  EXPECT_EQ(h.generated_count(5), 0);
}

TEST(Penalties, MatchTheReferenceForRandomHistoriesPathsAndSigns) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const PenaltyParams params[] = {{0.7f, 0, 1},      {0, -1.3f, 1},   {0, 0, 1.7f},     {0, 0, 0.6f},
                                  {-2, 2, 1},        {1.1f, 0.4f, 3}, {-0.5f, -0.2f, 0.3f}, {2, -2, 10}};
  for (const PenaltyParams& p : params) {
    for (int trial = 0; trial < 40; ++trial) {
      const int vocab = 1 + int(rng() % 50);
      std::uniform_int_distribution<int32_t> id(0, vocab - 1);
      std::vector<int32_t> prompt(1 + rng() % 12), generated(rng() % 15), path(rng() % 7);
      for (int32_t& t : prompt) t = id(rng);
      for (int32_t& t : generated) t = id(rng);
      for (int32_t& t : path) t = id(rng);
      std::vector<float> logits(vocab);
      for (float& x : logits) x = normal(rng);
      logits[size_t(id(rng))] = 0.0f;
      if (vocab > 3) logits[size_t(id(rng))] = -kInf;  // a masked token stays masked
      std::vector<int32_t> all = generated;
      all.insert(all.end(), path.begin(), path.end());
      const std::vector<float> want = reference(logits, p, prompt, all);
      std::vector<float> got = logits;
      history_of(p, prompt, generated).apply(path.data(), int(path.size()), vocab, got.data());
      for (int t = 0; t < vocab; ++t) {
        if (std::isinf(want[t])) {
          EXPECT_EQ(got[t], want[t]);
        } else {
          EXPECT_FLOAT_EQ(got[t], want[t]) << "token " << t << " trial " << trial;
        }
      }
      // The path counted as generated gives the same bits as the plain row after those tokens were generated.
      std::vector<float> plain = logits;
      history_of(p, prompt, all).apply(nullptr, 0, vocab, plain.data());
      EXPECT_EQ(std::memcmp(plain.data(), got.data(), sizeof(float) * vocab), 0) << "trial " << trial;
    }
  }
}

// A tree's rows each get their own path: row i equals the plain row after generated + path(root..i).
TEST(Penalties, TreeRowsCountTheirOwnPath) {
  const PenaltyParams p{0.4f, 0.9f, 1.5f};
  const std::vector<int32_t> prompt = {3, 1, 4}, generated = {1, 5, 9, 2};
  // Root (last generated token 2), children 6 and 5, then 6 -> 6 -> 5, 5 -> 1.
  const std::vector<int32_t> token = {2, 6, 5, 6, 1, 5};
  const std::vector<int32_t> parent = {-1, 0, 0, 1, 2, 3};
  const int vocab = 10, n = int(token.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> raw(size_t(n) * vocab);  // [n, vocab]
  for (float& x : raw) x = normal(rng);
  std::vector<float> rows = raw;
  const PenaltyHistory h = history_of(p, prompt, generated);
  h.apply_to_tree(token.data(), parent.data(), n, vocab, rows.data());
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> all = generated;
    for (int j = i; j > 0; j = parent[j]) all.push_back(token[j]);
    const std::vector<float> raw_row(raw.begin() + size_t(i) * vocab, raw.begin() + size_t(i + 1) * vocab);
    std::vector<float> plain = raw_row;
    history_of(p, prompt, all).apply(nullptr, 0, vocab, plain.data());
    EXPECT_EQ(std::memcmp(plain.data(), &rows[size_t(i) * vocab], sizeof(float) * vocab), 0) << "node " << i;
    const std::vector<float> want = reference(raw_row, p, prompt, all);
    for (int t = 0; t < vocab; ++t) EXPECT_FLOAT_EQ(rows[size_t(i) * vocab + t], want[t]) << i << " " << t;
  }
  // Node 5 (path 6, 6, 5) and node 2 (path 5) differ in token 6's count: the rows are path-dependent.
  EXPECT_NE(rows[5 * vocab + 6] - raw[5 * vocab + 6], rows[2 * vocab + 6] - raw[2 * vocab + 6]);
  std::vector<int32_t> bad_parent = parent;
  bad_parent[3] = 4;  // a parent after its child
  EXPECT_THROW(h.apply_to_tree(token.data(), bad_parent.data(), n, vocab, rows.data()), Error);
}

TEST(Penalties, NeutralTouchesNothingAndPromptsMatterOnlyToRepetition) {
  const std::vector<int32_t> prompt = {0, 1, 2, 3};
  PenaltyHistory neutral(PenaltyParams{}, prompt);
  neutral.add_generated(5);
  EXPECT_FALSE(neutral.active());
  EXPECT_EQ(neutral.distinct_tokens(), 0);
  std::vector<float> row = {-0.0f, 1.0f, -1.0f, kInf, 2.0f, 3.0f}, before = row;
  const int32_t path[] = {1, 2};
  neutral.apply(path, 2, 6, row.data());
  EXPECT_EQ(std::memcmp(row.data(), before.data(), sizeof(float) * row.size()), 0);
  EXPECT_FALSE(PenaltyHistory().active());

  PenaltyHistory counts(PenaltyParams{0.5f, 0, 1}, prompt);  // presence only: the prompt is not kept
  EXPECT_TRUE(counts.active());
  EXPECT_EQ(counts.distinct_tokens(), 0);
  counts.add_generated(1);
  counts.add_generated(1);
  EXPECT_EQ(counts.distinct_tokens(), 1);
  PenaltyHistory repetition(PenaltyParams{0, 0, 1.2f}, prompt);
  EXPECT_EQ(repetition.distinct_tokens(), 4);
  repetition.add_generated(2);
  repetition.add_generated(7);
  EXPECT_EQ(repetition.distinct_tokens(), 5);
  EXPECT_EQ(penalized_logit(-kInf, 3, true, PenaltyParams{2, 2, 2}), -kInf);
  EXPECT_EQ(penalized_logit(1.5f, 0, false, PenaltyParams{2, 2, 2}), 1.5f);
}

TEST(Penalties, RejectIdsOutsideTheVocabulary) {
  PenaltyHistory h(PenaltyParams{0, 0, 1.5f}, {1, 7});
  std::vector<float> row(8, 0.0f);
  EXPECT_NO_THROW(h.apply(nullptr, 0, 8, row.data()));
  EXPECT_THROW(h.apply(nullptr, 0, 7, row.data()), Error);  // prompt id 7 outside [0, 7)
  const int32_t path[] = {8};
  EXPECT_THROW(h.apply(path, 1, 8, row.data()), Error);
  EXPECT_THROW(h.add_generated(-1), Error);
}

}  // namespace
}  // namespace ts
