#include "spec/calibration.h"

#include <algorithm>
#include <cmath>

namespace ts::spec {

namespace {

constexpr double kQClamp = 1e-12;
constexpr double kRidge = 1e-3;  // pulls (a, b) toward (1, 0); negligible against thousands of edges
constexpr double kMinSlope = 1e-3;

double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }
double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

// Penalised log-likelihood of (a, b).
double objective(const std::vector<EdgeRecord>& records, double a, double b) {
  double sum = 0;
  for (const EdgeRecord& r : records) {
    const double z = a * r.logit_q + b;
    sum += r.accepted ? log_sigmoid(z) : log_sigmoid(-z);
  }
  return sum - 0.5 * kRidge * ((a - 1) * (a - 1) + b * b);
}

}  // namespace

double clamped_logit(double q) {
  q = std::clamp(q, kQClamp, 1 - kQClamp);
  return std::log(q) - std::log1p(-q);
}

double Calibration::p_hat(double q) const { return sigmoid(a * clamped_logit(q) + b); }
double Calibration::log_p_hat(double q) const { return log_sigmoid(a * clamped_logit(q) + b); }

Calibration fit_calibration(const std::vector<EdgeRecord>& records) {
  Calibration c;
  if (records.empty()) return c;
  double value = objective(records, c.a, c.b);
  for (int iter = 0; iter < 100; ++iter) {
    // Gradient and (negated) Hessian of the penalised log-likelihood.
    double ga = -kRidge * (c.a - 1), gb = -kRidge * c.b;
    double haa = kRidge, hab = 0, hbb = kRidge;
    for (const EdgeRecord& r : records) {
      const double x = r.logit_q;
      const double p = sigmoid(c.a * x + c.b);
      const double residual = r.accepted - p;
      const double w = p * (1 - p);
      ga += residual * x;
      gb += residual;
      haa += w * x * x;
      hab += w * x;
      hbb += w;
    }
    const double det = haa * hbb - hab * hab;
    if (!(det > 0)) break;
    const double step_a = (hbb * ga - hab * gb) / det;
    const double step_b = (haa * gb - hab * ga) / det;
    // Halve the Newton step until the objective does not decrease (the objective is concave, so this ends).
    double scale = 1;
    double next = value;
    for (; scale > 1e-10; scale *= 0.5) {
      next = objective(records, c.a + scale * step_a, c.b + scale * step_b);
      if (next >= value) break;
    }
    if (scale <= 1e-10) break;
    c.a += scale * step_a;
    c.b += scale * step_b;
    const bool converged = std::abs(scale * step_a) + std::abs(scale * step_b) < 1e-10;
    value = next;
    if (converged) break;
  }
  c.a = std::max(c.a, kMinSlope);
  return c;
}

double expected_calibration_error(const std::vector<EdgeRecord>& records, const Calibration& calibration) {
  if (records.empty()) return 0;
  double predicted[kEceBins] = {}, observed[kEceBins] = {};
  int64_t count[kEceBins] = {};
  for (const EdgeRecord& r : records) {
    const double p = sigmoid(calibration.a * r.logit_q + calibration.b);
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
