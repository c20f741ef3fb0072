// processed_distribution against hand-computed cases and a straightforward reference (full sort, long double).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "sampling/distribution.h"

namespace ts {
namespace {

// The reference: sort every token once by (logit desc, index asc) and apply each processor in that order.
std::vector<double> reference_processed(const std::vector<float>& logits, const SamplingParams& params) {
  const int n = static_cast<int>(logits.size());
  std::vector<double> out(n, 0);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (params.temperature == 0) {
    out[order[0]] = 1;
    return out;
  }
  std::vector<bool> kept(n, true);
  for (int i = 0; i < n; ++i) kept[i] = std::isfinite(logits[i]);
  if (params.top_k > 0 && params.top_k < n) {
    const float kth = logits[order[params.top_k - 1]];
    for (int i = 0; i < n; ++i) kept[i] = kept[i] && logits[i] >= kth;
  }
  std::vector<long double> p(n, 0);
  long double sum = 0;
  for (int i = 0; i < n; ++i) {
    if (kept[i]) sum += p[i] = std::exp((static_cast<long double>(logits[i]) - logits[order[0]]) / params.temperature);
  }
  for (auto& v : p) v /= sum;
  if (params.top_p < 1) {
    long double before = 0;
    for (int i : order) {
      if (!kept[i]) continue;
      if (before >= params.top_p) kept[i] = false;
      before += p[i];
    }
  }
  if (params.min_p > 0) {
    for (int i = 0; i < n; ++i) kept[i] = kept[i] && p[i] >= params.min_p * p[order[0]];
  }
  sum = 0;
  for (int i = 0; i < n; ++i) sum += kept[i] ? p[i] : 0;
  for (int i = 0; i < n; ++i) out[i] = kept[i] ? static_cast<double>(p[i] / sum) : 0;
  return out;
}

std::vector<double> processed(const std::vector<float>& logits, const SamplingParams& params) {
  std::vector<double> p;
  processed_distribution(logits.data(), static_cast<int>(logits.size()), params, &p);
  return p;
}

SamplingParams make(float t, int k = 0, float top_p = 1, float min_p = 0) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = top_p;
  s.min_p = min_p;
  return s;
}

void expect_probs(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

TEST(ProcessedDistribution, HandComputedCases) {
  // Logits = log of (0.1, 0.2, 0.3, 0.4): temperature 1 gives those probabilities back.
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  expect_probs(processed(logits, make(1)), {0.1, 0.2, 0.3, 0.4}, 1e-7);
  // top_k 2 keeps 0.3, 0.4.
  expect_probs(processed(logits, make(1, 2)), {0, 0, 3.0 / 7, 4.0 / 7}, 1e-7);
  // top_p 0.5: 0.4 (mass before 0) and 0.3 (mass before 0.4 < 0.5) kept; 0.2 has 0.7 before it.
  expect_probs(processed(logits, make(1, 0, 0.5f)), {0, 0, 3.0 / 7, 4.0 / 7}, 1e-7);
  // top_p 0.4 exactly: only 0.4 (0.3 has mass 0.4 before it, not < 0.4); float rounding of 0.4f decides, so use 0.39.
  expect_probs(processed(logits, make(1, 0, 0.39f)), {0, 0, 0, 1}, 1e-7);
  // min_p 0.6: floor 0.24 keeps 0.3 and 0.4.
  expect_probs(processed(logits, make(1, 0, 1, 0.6f)), {0, 0, 3.0 / 7, 4.0 / 7}, 1e-7);
  // Temperature 2 on logits (0, ln 4): probs proportional to (1, 2).
  expect_probs(processed({0.0f, std::log(4.0f)}, make(2)), {1.0 / 3, 2.0 / 3}, 1e-7);
  // Temperature 0: one-hot argmax, lowest index on ties.
  expect_probs(processed({1, 3, 3, 2}, make(0, 1, 0.1f, 0.9f)), {0, 1, 0, 0});
}

TEST(ProcessedDistribution, TopKKeepsTiesAtTheEdge) {
  // HF: tokens tied with the k-th largest logit survive.
  expect_probs(processed({1, 2, 2, 0}, make(1, 1)), {0, 0.5, 0.5, 0});
}

TEST(ProcessedDistribution, MatchesReferenceOnRandomCombinations) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0, 2);
  const float temperatures[] = {0.0f, 0.3f, 1.0f, 1.7f};
  const int top_ks[] = {0, 1, 3, 10, 49, 50, 80};
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.05f};
  const float min_ps[] = {0.0f, 0.01f, 0.3f, 1.0f};
  int cases = 0;
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<float> logits(50);
    for (float& v : logits) v = normal(rng);
    if (trial % 3 == 0) logits[trial] = -std::numeric_limits<float>::infinity();  // a masked token
    if (trial % 4 == 1) logits[5] = logits[9];                                      // a tie
    for (float t : temperatures) {
      for (int k : top_ks) {
        for (float tp : top_ps) {
          for (float mp : min_ps) {
            const SamplingParams params = make(t, k, tp, mp);
            expect_probs(processed(logits, params), reference_processed(logits, params));
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 12 * 4 * 7 * 4 * 4);
}

TEST(ProcessedDistribution, LargeFlatVocabularyTopP) {
  // top_p needs more than the first sorted prefix (64): the growing partial sort must still be exact.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> uniform(0, 0.5f);
  std::vector<float> logits(5000);
  for (float& v : logits) v = uniform(rng);
  for (float tp : {0.3f, 0.9f, 0.999f}) {
    const SamplingParams params = make(1, 0, tp);
    const std::vector<double> got = processed(logits, params);
    expect_probs(got, reference_processed(logits, params));
    EXPECT_GT(std::count_if(got.begin(), got.end(), [](double v) { return v > 0; }), 64);
  }
}

TEST(ProcessedDistribution, RejectsBadInput) {
  const std::vector<float> logits = {0, 1};
  std::vector<double> p;
  EXPECT_THROW(processed_distribution(logits.data(), 2, make(-1), &p), Error);
  EXPECT_THROW(processed_distribution(logits.data(), 2, make(1, -1), &p), Error);
  EXPECT_THROW(processed_distribution(logits.data(), 2, make(1, 0, 0), &p), Error);
  EXPECT_THROW(processed_distribution(logits.data(), 2, make(1, 0, 1.5f), &p), Error);
  EXPECT_THROW(processed_distribution(logits.data(), 2, make(1, 0, 1, -0.1f), &p), Error);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> masked = {-inf, -inf};
  EXPECT_THROW(processed_distribution(masked.data(), 2, make(1), &p), Error);
  const std::vector<float> nan = {0, std::nanf("")};
  EXPECT_THROW(processed_distribution(nan.data(), 2, make(1), &p), Error);
  EXPECT_THROW(processed_distribution(logits.data(), 0, make(1), &p), Error);
}

TEST(Argmax, LowestIndexOnTies) {
  const float x[] = {1, 5, 2, 5, -3};
  EXPECT_EQ(argmax(x, 5), 1);
  EXPECT_EQ(argmax(x, 1), 0);
  EXPECT_THROW(argmax(x, 0), Error);
}

// exp_nonpositive against std::exp: within 2 ulp over the whole non-positive range (subnormal results and
// underflow to 0 included), exact at 0, 0 at -inf; in place too.
TEST(ExpNonpositive, MatchesStdExp) {
  std::mt19937_64 rng(3);
  std::vector<double> x;
  for (int i = 0; i < 20000; ++i) x.push_back(-std::uniform_real_distribution<double>(0, 1)(rng) * (i % 2 ? 1.0 : 760.0));
  for (double v : {0.0, -0.0, -1e-300, -1e-17, -0.34657359027997264, -0.6931471805599453, -1.0, -699.99, -700.0,
                   -700.01, -708.4, -709.0, -744.0, -745.2, -1299.0, -1301.0, -1e4, -std::numeric_limits<double>::infinity()})
    x.push_back(v);
  std::vector<double> y(x.size());
  exp_nonpositive(x.data(), static_cast<int>(x.size()), y.data());
  double worst_ulps = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(x[i]);
    const double ulp = std::nextafter(want, 2.0) - want;  // subnormal and 0 results: the smallest subnormal
    const double ulps = std::round(std::abs(y[i] - want) / ulp);  // in double: a wrong result is ~1e80 ulps off
    worst_ulps = std::max(worst_ulps, ulps);
    ASSERT_LE(ulps, 2.0) << "x = " << x[i] << " got " << y[i] << " want " << want;
  }
  EXPECT_EQ(y[x.size() - 1], 0.0);
  EXPECT_EQ(y[x.size() - 2], 0.0);
  EXPECT_EQ(y[20000], 1.0);  // exp(0)
  exp_nonpositive(x.data(), 3, x.data());  // in place
  EXPECT_EQ(x[0], y[0]);
  EXPECT_EQ(x[2], y[2]);
  std::printf("exp_nonpositive: worst error %.0f ulp over %zu arguments\n", worst_ulps, y.size());
}

// The plain loop argmax() must agree with: the first maximum, NaN never winning unless it is x[0].
int plain_argmax(const std::vector<float>& x) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(x.size()); ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

TEST(Argmax, AgreesWithThePlainLoop) {
  std::mt19937 rng(5);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::nanf(""), 1.0f, -1.0f};
  int cases = 0;
  for (int n : {1, 2, 15, 16, 17, 31, 33, 100, 4096, 4099}) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<float> x(n);
      // Few distinct values, so ties are common; some rows get specials (NaN, +-0, +-inf) at random places,
      // including x[0].
      std::uniform_int_distribution<int> value(-3, 3), special(0, 6), where(0, n - 1);
      for (float& v : x) v = static_cast<float>(value(rng));
      const int n_special = trial % 3 == 0 ? 0 : 1 + trial % 4;
      for (int k = 0; k < n_special; ++k) x[where(rng)] = specials[special(rng)];
      if (trial % 7 == 1) x[0] = std::nanf("");
      if (trial % 11 == 2) std::fill(x.begin(), x.end(), trial % 2 ? 0.0f : -0.0f), x[n / 2] = 0.0f;
      ASSERT_EQ(argmax(x.data(), n), plain_argmax(x)) << "n " << n << " trial " << trial;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 600);
}

}  // namespace
}  // namespace ts
