// The server's Prometheus metrics, named as vLLM names them (the `vllm:` prefix, a model_name label), so that
// dashboards built for vLLM and the Gateway API Inference Extension / llm-d routers, which route on
// vllm:num_requests_waiting and vllm:kv_cache_usage_perc, can use treespark as a model server.
// Request-level figures (TTFT, inter-token latency, end-to-end latency, token counters) are measured here, where
// the tokens reach the client; engine-level ones (running, waiting, KV use, speculative decoding counters) come
// from the backend's snapshot at scrape time. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/backend.h"

namespace ts::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // increasing; +Inf is implied
  void observe(double value, uint64_t times = 1);
  // Prometheus text lines name_bucket{labels,le=..}, name_sum, name_count. `labels` is `k="v"` or "".
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> in_bucket_;  // [bounds + 1]: observations in (bounds[i-1], bounds[i]], last: above all
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void request_started(int prompt_tokens);
  void first_token(double seconds_since_arrival);
  // `n` tokens arrived together `seconds` after the previous ones: n observations of seconds / n (a speculative
  // round delivers several tokens at once; the mean per-token latency is what this preserves).
  void tokens(int n, double seconds_since_previous);
  void request_finished(const std::string& finish_reason, double e2e_seconds, int generation_tokens);
  void rejected(int http_status);  // an error response, by status

  // The whole /metrics page: server-side counters plus the backend snapshot. `state` is loading|ready|draining.
  std::string render(const std::string& model_name, const BackendMetrics* backend, const std::string& state,
                     int in_flight, int open_connections = 0) const;

 private:
  mutable std::mutex mutex_;
  Histogram ttft_, itl_, e2e_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, uint64_t> finished_by_reason_;
  std::map<int, uint64_t> errors_by_status_;
};

}  // namespace ts::server
