#include "engine/metrics.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ts {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "";
}

const char* reject_reason_name(RejectReason reason) {
  switch (reason) {
    case RejectReason::None: return "";
    case RejectReason::BadParams: return "bad_params";
    case RejectReason::OverContext: return "over_context";
    case RejectReason::QueueFull: return "queue_full";
    case RejectReason::Draining: return "draining";
  }
  return "";
}

Histogram Histogram::with_bounds(std::vector<double> bounds) {
  for (size_t i = 1; i < bounds.size(); ++i)
    TS_CHECK(bounds[i] > bounds[i - 1], "histogram bounds must increase");
  Histogram h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void Histogram::observe(double seconds, int64_t times) {
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();  // first >= x
  counts[bucket] += times;
  sum += seconds * double(times);
  count += times;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}

std::vector<double> inter_token_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
          0.3,   0.4,    0.5,   0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0};
}

std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::string describe_policy_step(const StepReport& r) {
  if (r.batch == 0) return "";
  std::string line = cat("treespark policy: step ", r.step, " batch ", r.batch,
                         r.prefill_tokens > 0 ? cat(" prefill ", r.prefill_tokens) : std::string(),
                         r.probe ? " probe" : "", r.plain_probe ? " plain-probe" : "",
                         r.modelled_ms > 0 ? cat(" predicted ", r.modelled_ms, " ms") : std::string(), " actual ",
                         r.step_ms, " ms",
                         r.backlog_rows > 0 ? cat(" (drafter backlog ", r.backlog_rows, " rows ", r.backlog_ms, " ms)")
                                            : std::string(),
                         ";");
  for (const RoundDecision& d : r.decisions) {
    const std::string priced =
        d.priced_rows > 0 ? cat(" E ", std::round(d.priced_tokens * 100) / 100, " k ", d.priced_rows,
                                d.probe_priced ? " probe-priced" : "")
                          : std::string();
    line += d.speculate
                ? cat(" [", d.id, " theta ", d.theta, " nodes ", d.tree_size, " acc ", d.accepted, priced, "]")
                : cat(" [", d.id, " plain", priced, "]");
  }
  return line;
}

}  // namespace ts
