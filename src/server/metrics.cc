#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace ts::server {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string label_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + num(v) + "\n";
}

// vLLM's buckets, with finer ones below 10 ms (a CPU model's inter-token latency lives there).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
const std::vector<double> kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                         0.3,   0.4,    0.5,   0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0};
const std::vector<double> kE2eBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                                         50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), in_bucket_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, uint64_t times) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  in_bucket_[i] += times;
  sum_ += value * double(times);
  count_ += times;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += in_bucket_[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += in_bucket_.back();
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics() : ttft_(kTtftBuckets), itl_(kItlBuckets), e2e_(kE2eBuckets) {}

void ServerMetrics::request_started(int prompt_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += uint64_t(std::max(0, prompt_tokens));
}

void ServerMetrics::first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::tokens(int n, double seconds) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  itl_.observe(seconds / n, uint64_t(n));
}

void ServerMetrics::request_finished(const std::string& reason, double e2e_seconds, int generation_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  e2e_.observe(e2e_seconds);
  generation_tokens_ += uint64_t(std::max(0, generation_tokens));
  finished_by_reason_[reason] += 1;
}

void ServerMetrics::rejected(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_by_status_[status] += 1;
}

std::string ServerMetrics::render(const std::string& model_name, const BackendMetrics* b, const std::string& state,
                                  int in_flight, int open_connections) const {
  const std::string L = "model_name=\"" + label_escape(model_name) + "\"";
  const BackendMetrics none;
  const BackendMetrics& m = b ? *b : none;
  std::string out;
  out.reserve(8192);
  header(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  sample(out, "vllm:num_requests_running", L, m.running);
  header(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  sample(out, "vllm:num_requests_waiting", L, m.waiting);
  header(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  sample(out, "vllm:kv_cache_usage_perc", L, m.kv_cache_usage);
  header(out, "vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.");
  sample(out, "vllm:spec_decode_num_drafts_total", L, double(m.spec_drafts));
  header(out, "vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.");
  sample(out, "vllm:spec_decode_num_draft_tokens_total", L, double(m.spec_draft_tokens));
  header(out, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.");
  sample(out, "vllm:spec_decode_num_accepted_tokens_total", L, double(m.spec_accepted_tokens));
  header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.");
  for (size_t p = 0; p < m.accepted_per_pos.size(); ++p)
    sample(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", L + ",position=\"" + std::to_string(p) + "\"",
           double(m.accepted_per_pos[p]));

  std::lock_guard<std::mutex> lock(mutex_);
  header(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  sample(out, "vllm:prompt_tokens_total", L, double(prompt_tokens_));
  header(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
  sample(out, "vllm:generation_tokens_total", L, double(generation_tokens_));
  header(out, "vllm:request_success_total", "counter", "Count of finished requests, by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished_by_reason_.find(reason);
    sample(out, "vllm:request_success_total", L + ",finished_reason=\"" + reason + "\"",
           it == finished_by_reason_.end() ? 0.0 : double(it->second));
  }
  header(out, "vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.");
  ttft_.render(out, "vllm:time_to_first_token_seconds", L);
  header(out, "vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.");
  itl_.render(out, "vllm:inter_token_latency_seconds", L);
  header(out, "vllm:e2e_request_latency_seconds", "histogram", "Histogram of end to end request latency in seconds.");
  e2e_.render(out, "vllm:e2e_request_latency_seconds", L);

  header(out, "treespark:http_requests_in_flight", "gauge", "Completion requests the HTTP layer holds.");
  sample(out, "treespark:http_requests_in_flight", L, in_flight);
  header(out, "treespark:http_open_connections", "gauge", "Client connections open, idle ones included.");
  sample(out, "treespark:http_open_connections", L, open_connections);
  header(out, "treespark:server_state", "gauge", "1 for the server's current state (loading, ready, draining).");
  for (const char* s : {"loading", "ready", "draining"})
    sample(out, "treespark:server_state", L + ",state=\"" + s + "\"", state == s ? 1.0 : 0.0);
  header(out, "treespark:http_errors_total", "counter", "Error responses, by HTTP status.");
  for (const auto& [status, n] : errors_by_status_)
    sample(out, "treespark:http_errors_total", L + ",status=\"" + std::to_string(status) + "\"", double(n));
  for (const auto& [name, v] : m.gauges) {
    header(out, "treespark:" + name, "gauge", "Engine gauge.");
    sample(out, "treespark:" + name, L, v);
  }
  for (const auto& [name, v] : m.counters) {
    header(out, "treespark:" + name + "_total", "counter", "Engine counter.");
    sample(out, "treespark:" + name + "_total", L, v);
  }
  return out;
}

}  // namespace ts::server
