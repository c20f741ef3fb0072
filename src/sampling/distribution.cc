#include "sampling/distribution.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "core/error.h"

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

// exp of kExpLanes doubles x <= 0 (-inf included): x = k ln2 + r (Cody-Waite split, |r| <= ln2 / 2), exp(r) by its
// Taylor polynomial of degree 13 (truncation < 1e-17 relative) in Horner form, times 2^k built in the exponent
// bits. Below -700 (where 2^k would leave the normal range) the lane computes exp(x + 600) * 2^-600, whose one
// rounding to a subnormal or 0 is that of the true value up to the polynomial's error; x < -1300 and -inf give 0.
// Plain IEEE adds and multiplies in a fixed order, never contracted to FMA (fp-contract=off), so every ISA clone
// computes the same bits; lane-independent straight-line code, which the compiler turns into vectors.
constexpr int kExpLanes = 32;  // 4 independent AVX-512 vectors (8 AVX2): the Horner chains overlap
#define TS_EXP_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
// Element-wise loops (exact IEEE operations, lane-independent): vectorised the same way.
#define TS_VEC_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3", "fp-contract=off")))

// x, out: [kExpLanes]; out may alias x (every lane is read before any is written).
TS_EXP_CLONES void exp_block(const double* x, double* out) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2: 32 leading bits, so k * kLn2Hi
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // is exact for |k| < 2^11; kLn2Lo is the rest
  constexpr double kRound = 0x1.8p52;  // adding it rounds |v| < 2^51 to an integer in the low mantissa bits
  constexpr double kFastMin = -700, kShift = 600, kUnshift = 0x1p-600;
  int64_t round_bits;
  std::memcpy(&round_bits, &kRound, 8);
  double r[kExpLanes], p[kExpLanes], post[kExpLanes];
  int64_t scale[kExpLanes];
  for (int i = 0; i < kExpLanes; ++i) {
    const bool low = x[i] < kFastMin;
    const double shifted = x[i] + kShift;
    const double v = low ? (shifted > kFastMin ? shifted : kFastMin) : x[i];  // in [-700, 0]
    post[i] = low ? kUnshift : 1.0;
    const double t = v * kLog2e + kRound;
    const double k = t - kRound;
    int64_t bits;
    std::memcpy(&bits, &t, 8);
    scale[i] = (bits - round_bits + 1023) << 52;  // 2^k, k in [-1010, 0]: a normal double
    r[i] = (v - k * kLn2Hi) - k * kLn2Lo;
  }
  constexpr double c[14] = {1.0,           1.0,            1.0 / 2,         1.0 / 6,        1.0 / 24,
                            1.0 / 120,     1.0 / 720,      1.0 / 5040,      1.0 / 40320,    1.0 / 362880,
                            1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};
  for (int i = 0; i < kExpLanes; ++i) p[i] = c[13];
#pragma GCC unroll 13
  for (int d = 12; d >= 0; --d)
    for (int i = 0; i < kExpLanes; ++i) p[i] = p[i] * r[i] + c[d];
  for (int i = 0; i < kExpLanes; ++i) {
    double two_k;
    std::memcpy(&two_k, &scale[i], 8);
    out[i] = (p[i] * two_k) * post[i];
  }
}

// Sum of x: [n] in 8 interleaved partial sums combined pairwise: a fixed order (the same bits every call and on
// every ISA clone) whose chains overlap.
TS_VEC_CLONES double sum8(const double* x, int n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += x[i + k];
  for (int k = 0; i < n; ++i, ++k) part[k] += x[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

TS_VEC_CLONES void divide_all(double* x, int n, double by) {
  for (int i = 0; i < n; ++i) x[i] /= by;
}

// z[i] = logits[i] / temperature, returns max z; *nan_count: NaN logits. One pass, lane-wise max.
TS_VEC_CLONES double scale_and_max(const float* logits, int n, double temperature, double* z, int* nan_count) {
  double lane_max[8];
  for (int k = 0; k < 8; ++k) lane_max[k] = -std::numeric_limits<double>::infinity();
  int nans = 0;
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = static_cast<double>(logits[i + k]) / temperature;
      z[i + k] = v;
      nans += v != v;
      lane_max[k] = v > lane_max[k] ? v : lane_max[k];
    }
  for (int k = 0; i < n; ++i, ++k) {
    const double v = static_cast<double>(logits[i]) / temperature;
    z[i] = v;
    nans += v != v;
    lane_max[k] = v > lane_max[k] ? v : lane_max[k];
  }
  double m = lane_max[0];
  for (int k = 1; k < 8; ++k) m = lane_max[k] > m ? lane_max[k] : m;
  *nan_count = nans;
  return m;
}

// z[i] = logits[i] / temperature; returns max z. Throws when no z is finite-or-(+inf).
double scale_logits(const float* logits, int vocab, double temperature, std::vector<double>* z) {
  z->resize(vocab);
  int nans = 0;
  const double max_z = scale_and_max(logits, vocab, temperature, z->data(), &nans);
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
  exp_nonpositive(e, vocab, e);  // exp(-inf) = 0 for masked tokens
  divide_all(e, vocab, sum8(e, vocab));
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
  divide_all(probs->data(), int(probs->size()), sum8(probs->data(), int(probs->size())));
}

}  // namespace

void exp_nonpositive(const double* x, int n, double* out) {
  int i = 0;
  for (; i + kExpLanes <= n; i += kExpLanes) exp_block(x + i, out + i);
  if (i < n) {
    double lanes[kExpLanes] = {};  // the tail, padded with exp(0)
    std::copy(x + i, x + n, lanes);
    exp_block(lanes, lanes);
    std::copy(lanes, lanes + (n - i), out + i);
  }
}

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
