#include "spec/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ts::spec {

namespace {

constexpr double kQClamp = 1e-12;
constexpr double kRidge = 1e-3;  // pulls (a, b) toward (1, 0); negligible against thousands of edges
constexpr double kMinSlope = 1e-3;

double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }
double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

constexpr int kParams = 2 + kRankBuckets - 1;  // a, b, rank offsets 1..kRankBuckets-1

// The fit's parameters as a vector: [a, b, offset_1, ..., offset_{kRankBuckets-1}].
using Params = std::array<double, kParams>;

double linear_term(const Params& t, const EdgeRecord& r) {
  const int bucket = rank_bucket(r.sibling_rank);
  return t[0] * r.logit_q + t[1] + (bucket > 0 ? t[1 + bucket] : 0.0);
}

// Penalised log-likelihood; the ridge pulls toward (a, b, offsets) = (1, 0, 0).
double objective(const std::vector<EdgeRecord>& records, const Params& t) {
  double sum = 0;
  for (const EdgeRecord& r : records) {
    const double z = linear_term(t, r);
    sum += r.accepted ? log_sigmoid(z) : log_sigmoid(-z);
  }
  double penalty = (t[0] - 1) * (t[0] - 1);
  for (int i = 1; i < kParams; ++i) penalty += t[i] * t[i];
  return sum - 0.5 * kRidge * penalty;
}

// Solves h x = g for a small symmetric positive definite h (Gaussian elimination with partial pivoting).
bool solve(std::array<std::array<double, kParams>, kParams> h, Params g, Params* x) {
  for (int col = 0; col < kParams; ++col) {
    int pivot = col;
    for (int r = col + 1; r < kParams; ++r)
      if (std::abs(h[r][col]) > std::abs(h[pivot][col])) pivot = r;
    if (!(std::abs(h[pivot][col]) > 1e-300)) return false;
    std::swap(h[col], h[pivot]);
    std::swap(g[col], g[pivot]);
    for (int r = col + 1; r < kParams; ++r) {
      const double f = h[r][col] / h[col][col];
      for (int c = col; c < kParams; ++c) h[r][c] -= f * h[col][c];
      g[r] -= f * g[col];
    }
  }
  for (int r = kParams - 1; r >= 0; --r) {
    double v = g[r];
    for (int c = r + 1; c < kParams; ++c) v -= h[r][c] * (*x)[c];
    (*x)[r] = v / h[r][r];
  }
  return true;
}

}  // namespace

double clamped_logit(double q) {
  q = std::clamp(q, kQClamp, 1 - kQClamp);
  return std::log(q) - std::log1p(-q);
}

double Calibration::p_hat(double q, int sibling_rank) const { return p_hat_of_logit(clamped_logit(q), sibling_rank); }
double Calibration::p_hat_of_logit(double logit_q, int sibling_rank) const {
  return sigmoid(a * logit_q + b + rank_offset[rank_bucket(sibling_rank)]);
}
double Calibration::log_p_hat(double q, int sibling_rank) const {
  return log_sigmoid(a * clamped_logit(q) + b + rank_offset[rank_bucket(sibling_rank)]);
}

Calibration fit_calibration(const std::vector<EdgeRecord>& records) {
  if (records.empty()) return Calibration{};
  Params t = {1, 0, 0, 0, 0};
  double value = objective(records, t);
  for (int iter = 0; iter < 100; ++iter) {
    // Gradient and (negated) Hessian of the penalised log-likelihood.
    Params g{};
    std::array<std::array<double, kParams>, kParams> h{};
    g[0] = -kRidge * (t[0] - 1);
    for (int i = 1; i < kParams; ++i) g[i] = -kRidge * t[i];
    for (int i = 0; i < kParams; ++i) h[i][i] = kRidge;
    for (const EdgeRecord& r : records) {
      const int bucket = rank_bucket(r.sibling_rank);
      Params x{};  // features
      x[0] = r.logit_q;
      x[1] = 1;
      if (bucket > 0) x[1 + bucket] = 1;
      const double p = sigmoid(linear_term(t, r));
      const double residual = r.accepted - p;
      const double w = p * (1 - p);
      for (int i = 0; i < kParams; ++i) {
        if (x[i] == 0) continue;
        g[i] += residual * x[i];
        for (int j = 0; j < kParams; ++j) h[i][j] += w * x[i] * x[j];
      }
    }
    Params step{};
    if (!solve(h, g, &step)) break;
    // Halve the Newton step until the objective does not decrease (the objective is concave, so this ends).
    double scale = 1, next = value;
    Params trial = t;
    for (; scale > 1e-10; scale *= 0.5) {
      for (int i = 0; i < kParams; ++i) trial[i] = t[i] + scale * step[i];
      next = objective(records, trial);
      if (next >= value) break;
    }
    if (scale <= 1e-10) break;
    double moved = 0;
    for (int i = 0; i < kParams; ++i) moved += std::abs(trial[i] - t[i]);
    t = trial;
    value = next;
    if (moved < 1e-10) break;
  }
  Calibration c;
  c.a = std::max(t[0], kMinSlope);
  c.b = t[1];
  for (int k = 1; k < kRankBuckets; ++k) c.rank_offset[k] = t[1 + k];
  return c;
}

double expected_calibration_error(const std::vector<EdgeRecord>& records, const Calibration& calibration) {
  if (records.empty()) return 0;
  double predicted[kEceBins] = {}, observed[kEceBins] = {};
  int64_t count[kEceBins] = {};
  for (const EdgeRecord& r : records) {
    const double p = sigmoid(calibration.a * r.logit_q + calibration.b +
                             calibration.rank_offset[rank_bucket(r.sibling_rank)]);
    const int bin = std::min(kEceBins - 1, static_cast<int>(p * kEceBins));
    predicted[bin] += p;
    observed[bin] += r.accepted;
    ++count[bin];
  }
  double ece = 0;
  for (int i = 0; i < kEceBins; ++i) {
    if (count[i] > 0) ece += std::abs(predicted[i] - observed[i]) / static_cast<double>(records.size());
  }
  return ece;
}

}  // namespace ts::spec
