// The /metrics page: Prometheus text named as vLLM names it (the `vllm:` prefix, a model_name label), so that
// dashboards built for vLLM and the Gateway API Inference Extension / llm-d routers, which route on
// vllm:num_requests_waiting and vllm:kv_cache_usage_perc, can use treespark as a model server.
// Two sources, no copies between them: the engine's own snapshot (EngineMetrics, engine/metrics.h: running,
// waiting, KV use, speculative decoding counters, the policy's latest step), rendered as it is at scrape time; and
// what only the HTTP layer sees, recorded here (ServerMetrics): TTFT, inter-token and end-to-end latency measured
// where the tokens reach the client, the tokens and finish reasons of the requests it answered (a stop string cuts
// both), and error responses by status. Every monotone count is a Prometheus counter named *_total.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/metrics.h"

namespace ts::server {

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

  // The whole /metrics page: the engine's snapshot (null while loading: its series are then left out, the vLLM
  // gauges read 0) and this layer's own. `state` is loading|ready|draining.
  std::string render(const std::string& model_name, const EngineMetrics* engine, const std::string& state,
                     int in_flight, int open_connections = 0) const;

 private:
  void render_requests(std::string& out, const std::string& labels) const;  // mutex_ held

  mutable std::mutex mutex_;
  Histogram ttft_, itl_, e2e_;  // seconds, from the request's arrival at the HTTP layer
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, uint64_t> finished_by_reason_;
  std::map<int, uint64_t> errors_by_status_;
};

}  // namespace ts::server
