#include "sampling/distribution.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/ops.h"

namespace ts {

void validate_sampling_params(const SamplingParams& params) {
  TS_CHECK(std::isfinite(params.temperature) && params.temperature >= 0,
           "sampling: temperature must be finite and >= 0, got ", params.temperature);
  TS_CHECK(params.top_k >= 0, "sampling: top_k must be >= 0 (0 = off), got ", params.top_k);
  TS_CHECK(params.top_p > 0 && params.top_p <= 1, "sampling: top_p must be in (0, 1], got ", params.top_p);
  TS_CHECK(params.min_p >= 0 && params.min_p <= 1, "sampling: min_p must be in [0, 1], got ", params.min_p);
}

int argmax(const float* x, int n) {
  TS_CHECK(n > 0, "argmax: need at least one element, got n = ", n);
  // The answer of the plain loop `if (x[i] > x[best]) best = i` (the first maximum; NaN never wins unless x[0] is
  // NaN), in two passes the compiler vectorises: the largest value in independent lanes (x > m ? x : m is one
  // max instruction, NaN never replaces a lane), then the first index holding it. That loop carries x[best]
  // through a load per element; this runs the 4096-logit rows of greedy verification several times faster.
  if (std::isnan(x[0])) return 0;
  constexpr int kLanes = 16;
  float lane_max[kLanes];
  for (int k = 0; k < kLanes; ++k) lane_max[k] = x[0];
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane_max[k] = x[i + k] > lane_max[k] ? x[i + k] : lane_max[k];
  float largest = x[0];
  for (int k = 0; k < kLanes; ++k) largest = lane_max[k] > largest ? lane_max[k] : largest;
  for (; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
  for (i = 0; i < n; ++i)
    if (x[i] == largest) return i;  // -0 == +0: the first of equal maxima, as the plain loop keeps
  return 0;  // unreachable: largest is one of the x[i]
}

namespace {

// z[i] = logits[i] / temperature; returns max z. Throws when no z is finite-or-(+inf).
double scale_logits(const float* logits, int vocab, double temperature, std::vector<double>* z) {
  z->resize(vocab);
  int nans = 0;
  const double max_z = kernels::scale_to_f64_and_max(logits, vocab, temperature, z->data(), &nans);
  if (nans > 0) {
    for (int i = 0; i < vocab; ++i) TS_CHECK(!std::isnan(logits[i]), "sampling: logit ", i, " is NaN");
  }
  TS_CHECK(std::isfinite(max_z), "sampling: expected at least one finite logit and none +inf, max is ", max_z);
  return max_z;
}

// probs[i] = exp(z[i] - max_z) / sum over tokens with keep (z > -inf); returns nothing.
void softmax_of_scaled(const std::vector<double>& z, double max_z, std::vector<double>* probs) {
  const int vocab = static_cast<int>(z.size());
  probs->resize(vocab);
  double* e = probs->data();
  for (int i = 0; i < vocab; ++i) e[i] = z[i] - max_z;
  kernels::exp_nonpositive_f64(e, vocab, e);  // exp(-inf) = 0 for masked tokens
  kernels::divide_f64(e, vocab, kernels::sum_f64(e, vocab));
}

// Top-p on normalised probs: zero every token outside the smallest descending prefix whose mass reaches top_p.
// Sorting the whole vocabulary is the slow part, so sort a growing prefix (partial_sort of the m largest) until
// the kept set ends inside it: for peaked distributions this stays O(vocab).
void apply_top_p(double top_p, std::vector<double>* probs, std::vector<int>* order) {
  const int vocab = static_cast<int>(probs->size());
  order->clear();
  for (int i = 0; i < vocab; ++i) {
    if ((*probs)[i] > 0) order->push_back(i);
  }
  const int count = static_cast<int>(order->size());
  const auto by_prob_desc = [&](int a, int b) {
    return (*probs)[a] > (*probs)[b] || ((*probs)[a] == (*probs)[b] && a < b);
  };
  int kept = count;
  for (int m = std::min(count, 64);; m = std::min(count, m * 4)) {
    std::partial_sort(order->begin(), order->begin() + m, order->end(), by_prob_desc);
    double mass_before = 0;
    int i = 0;
    for (; i < m && mass_before < top_p; ++i) mass_before += (*probs)[(*order)[i]];
    if (i < m || m == count) {  // the kept set ended inside the sorted prefix
      kept = i;
      break;
    }
  }
  for (int i = kept; i < count; ++i) (*probs)[(*order)[i]] = 0;
}

void normalise(std::vector<double>* probs) {
  const int vocab = int(probs->size());
  kernels::divide_f64(probs->data(), vocab, kernels::sum_f64(probs->data(), vocab));
}

}  // namespace

void exp_nonpositive(const double* x, int n, double* out) { kernels::exp_nonpositive_f64(x, n, out); }

void softmax_with_temperature(const float* logits, int vocab, double temperature, std::vector<double>* out) {
  TS_CHECK(vocab > 0, "softmax: vocab must be > 0, got ", vocab);
  TS_CHECK(temperature > 0 && std::isfinite(temperature), "softmax: temperature must be > 0, got ", temperature);
  std::vector<double>& z = *out;  // reuse the output as the scaled logits
  const double max_z = scale_logits(logits, vocab, temperature, &z);
  softmax_of_scaled(z, max_z, out);
}

void processed_distribution(const float* logits, int vocab, const SamplingParams& params, std::vector<double>* probs) {
  validate_sampling_params(params);
  TS_CHECK(vocab > 0, "sampling: vocab must be > 0, got ", vocab);
  if (params.temperature == 0) {
    probs->assign(vocab, 0.0);
    (*probs)[argmax(logits, vocab)] = 1.0;
    return;
  }
  // 1. temperature.
  thread_local std::vector<double> z;  // [vocab] scaled logits
  const double max_z = scale_logits(logits, vocab, params.temperature, &z);
  // 2. top-k on the scaled logits (same order as the raw ones); ties with the k-th largest survive.
  if (params.top_k > 0 && params.top_k < vocab) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (params.top_k - 1), sorted.end(), std::greater<double>());
    const double kth = sorted[params.top_k - 1];
    for (double& v : z) {
      if (v < kth) v = -std::numeric_limits<double>::infinity();
    }
  }
  // 3. softmax over the survivors (the max always survives top-k).
  softmax_of_scaled(z, max_z, probs);
  bool truncated = params.top_k > 0 && params.top_k < vocab;
  // 4. top-p.
  if (params.top_p < 1) {
    truncated = true;
    std::vector<int> order;
    apply_top_p(params.top_p, probs, &order);
  }
  // 5. min-p, relative to the largest probability (which renormalising after top-p would not change).
  if (params.min_p > 0) {
    truncated = true;
    const double floor = params.min_p * *std::max_element(probs->begin(), probs->end());
    for (double& v : *probs) {
      if (v < floor) v = 0;
    }
  }
  // 6. renormalise (softmax_of_scaled normalised already when no processor removed a token).
  if (truncated) normalise(probs);
}

}  // namespace ts
