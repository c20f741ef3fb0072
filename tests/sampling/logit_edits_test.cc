// The per-request logit edits (logit_adjust.h) and the reported logprobs (logprobs.h) against straightforward
// references: a full sort and a long-double log_softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "core/error.h"
#include "sampling/logit_adjust.h"
#include "sampling/logprobs.h"

namespace ts {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

double reference_logprob(const std::vector<float>& logits, int t) {
  const float largest = *std::max_element(logits.begin(), logits.end());
  long double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<long double>(x) - largest);
  return double(static_cast<long double>(logits[t]) - largest - std::log(sum));
}

// |got - want| within a relative 2e-6; -inf must be exactly -inf.
void expect_close(double got, double want, const std::string& what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, 2e-6 * (1 + std::fabs(want))) << what;
  }
}

TEST(LogitEdits, BiasAddsAndTheMaskBansUntilMinTokens) {
  const std::vector<std::pair<int32_t, float>> bias = {{1, 2.5f}, {3, -100.0f}, {1, 0.5f}};
  const std::vector<int32_t> stops = {0, 4, 99};  // 99 is outside the vocabulary: ignored
  for (int64_t index : {0, 1, 2, 3}) {
    std::vector<float> row = {0.5f, 1.0f, -2.0f, 4.0f, 3.0f};
    apply_logit_edits(logit_edits_at(bias, stops, /*min_tokens=*/2, index), 5, row.data());
    EXPECT_FLOAT_EQ(row[1], 4.0f);  // a repeated id adds twice
    EXPECT_FLOAT_EQ(row[2], -2.0f);
    EXPECT_FLOAT_EQ(row[3], -96.0f);
    if (index < 2) {
      EXPECT_EQ(row[0], -kInf);
      EXPECT_EQ(row[4], -kInf);
    } else {
      EXPECT_FLOAT_EQ(row[0], 0.5f);
      EXPECT_FLOAT_EQ(row[4], 3.0f);
    }
  }
  std::vector<float> row(5, 0.0f);
  const std::vector<std::pair<int32_t, float>> outside = {{5, 1.0f}};
  EXPECT_THROW(apply_logit_edits(LogitEdits{&outside, nullptr}, 5, row.data()), Error);
  EXPECT_TRUE(logit_edits_at({}, stops, 2, 2).empty());
  EXPECT_FALSE(logit_edits_at({}, stops, 2, 1).empty());
}

TEST(Logprobs, MatchALongDoubleLogSoftmaxAndSortTheTopList) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int vocab : {1, 5, 37, 4096}) {
    std::vector<float> logits(vocab);
    for (float& x : logits) x = normal(rng);
    if (vocab > 4) logits[2] = logits[3];  // a tie: the lower id ranks first
    if (vocab > 4) logits[4] = -kInf;      // a banned token
    for (int top_n : {0, 1, 3, 20}) {
      const int32_t token = vocab / 2;
      const TokenLogprobs got = token_logprobs(logits.data(), vocab, token, top_n);
      expect_close(got.logprob, reference_logprob(logits, token), "token");
      std::vector<int> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
      const int want_n = std::min(top_n, vocab);
      ASSERT_EQ(int(got.top.size()), want_n) << vocab << " " << top_n;
      for (int j = 0; j < want_n; ++j) {
        EXPECT_EQ(got.top[j].first, order[j]) << "rank " << j << " of vocab " << vocab;
        expect_close(got.top[j].second, reference_logprob(logits, order[j]), "top entry");
      }
    }
    if (vocab > 4) {
      EXPECT_EQ(token_logprobs(logits.data(), vocab, 4, 0).logprob, -kInf);
    }
  }
}

TEST(Logprobs, AreDeterministicAndRejectBadInput) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  const TokenLogprobs a = token_logprobs(logits.data(), 3, 2, 3), b = token_logprobs(logits.data(), 3, 2, 3);
  EXPECT_EQ(a.logprob, b.logprob);
  EXPECT_EQ(a.top, b.top);
  double mass = 0;
  for (const auto& [id, lp] : a.top) mass += std::exp(double(lp));
  EXPECT_NEAR(mass, 1.0, 1e-6);
  EXPECT_THROW(token_logprobs(logits.data(), 3, 3, 0), Error);
  EXPECT_THROW(token_logprobs(logits.data(), 3, 0, kMaxTopLogprobs + 1), Error);
  logits[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(token_logprobs(logits.data(), 3, 0, 0), Error);
  std::vector<float> banned = {-kInf, -kInf};
  EXPECT_THROW(token_logprobs(banned.data(), 2, 0, 0), Error);
}

}  // namespace
}  // namespace ts
