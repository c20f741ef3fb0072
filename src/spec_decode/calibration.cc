#include "spec_decode/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ts::spec_decode {

namespace {

constexpr double kQClamp = 1e-12;
constexpr double kRidge = 1e-3;  // pulls (a, b) toward (1, 0); negligible against thousands of edges
constexpr double kMinSlope = 1e-3;

double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }
double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

// The fit's parameters as a vector: [a, b, rank offsets 1..kRankBuckets-1, depth offsets 1..kDepthBuckets-1].
constexpr int kFirstRank = 2, kFirstDepth = kFirstRank + kRankBuckets - 1;
constexpr int kParams = kFirstDepth + kDepthBuckets - 1;
using Params = std::array<double, kParams>;

// The parameter indices an edge's offsets read (-1: the bucket whose offset is fixed at 0).
int rank_index(const EdgeRecord& r) {
  const int bucket = rank_bucket(r.sibling_rank);
  return bucket > 0 ? kFirstRank + bucket - 1 : -1;
}
int depth_index(const EdgeRecord& r) {
  const int bucket = depth_bucket(r.depth);
  return bucket > 0 ? kFirstDepth + bucket - 1 : -1;
}

double linear_term(const Params& t, const EdgeRecord& r) {
  const int rank = rank_index(r), depth = depth_index(r);
  return t[0] * r.logit_q + t[1] + (rank >= 0 ? t[rank] : 0.0) + (depth >= 0 ? t[depth] : 0.0);
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

double Calibration::p_hat(double q, int sibling_rank, int depth) const {
  return p_hat_of_logit(clamped_logit(q), sibling_rank, depth);
}
double Calibration::p_hat_of_logit(double logit_q, int sibling_rank, int depth) const {
  return sigmoid(a * logit_q + b + offset(sibling_rank, depth));
}
double Calibration::log_p_hat(double q, int sibling_rank, int depth) const {
  return log_sigmoid(a * clamped_logit(q) + b + offset(sibling_rank, depth));
}

Calibration fit_calibration(const std::vector<EdgeRecord>& records) {
  if (records.empty()) return Calibration{};
  Params t{};
  t[0] = 1;
  double value = objective(records, t);
  for (int iter = 0; iter < 100; ++iter) {
    // Gradient and (negated) Hessian of the penalised log-likelihood.
    Params g{};
    std::array<std::array<double, kParams>, kParams> h{};
    g[0] = -kRidge * (t[0] - 1);
    for (int i = 1; i < kParams; ++i) g[i] = -kRidge * t[i];
    for (int i = 0; i < kParams; ++i) h[i][i] = kRidge;
    for (const EdgeRecord& r : records) {
      // Features: logit_q, 1, and a 1 at the edge's rank and depth offsets (when not the fixed buckets).
      int index[4] = {0, 1, rank_index(r), depth_index(r)};
      double x[4] = {r.logit_q, 1, 1, 1};
      const int used = 2 + (index[2] >= 0) + (index[3] >= 0);
      if (index[2] < 0) index[2] = index[3];  // compact: the features in use come first
      const double p = sigmoid(linear_term(t, r));
      const double residual = r.accepted - p;
      const double w = p * (1 - p);
      for (int i = 0; i < used; ++i) {
        g[index[i]] += residual * x[i];
        for (int j = 0; j < used; ++j) h[index[i]][index[j]] += w * x[i] * x[j];
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
  for (int k = 1; k < kRankBuckets; ++k) c.rank_offset[k] = t[kFirstRank + k - 1];
  for (int k = 1; k < kDepthBuckets; ++k) c.depth_offset[k] = t[kFirstDepth + k - 1];
  return c;
}

double expected_calibration_error(const std::vector<EdgeRecord>& records, const Calibration& calibration) {
  if (records.empty()) return 0;
  double predicted[kEceBins] = {}, observed[kEceBins] = {};
  int64_t count[kEceBins] = {};
  for (const EdgeRecord& r : records) {
    const double p = calibration.p_hat_of_logit(r.logit_q, r.sibling_rank, r.depth);
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

DepthEce expected_calibration_error_by_depth(const std::vector<EdgeRecord>& records, const Calibration& calibration) {
  std::array<std::vector<EdgeRecord>, kDepthBuckets> by_depth;
  for (const EdgeRecord& r : records) by_depth[depth_bucket(r.depth)].push_back(r);
  DepthEce out;
  for (int k = 0; k < kDepthBuckets; ++k) {
    out.ece[k] = expected_calibration_error(by_depth[k], calibration);
    out.edges[k] = int64_t(by_depth[k].size());
  }
  return out;
}

}  // namespace ts::spec_decode
