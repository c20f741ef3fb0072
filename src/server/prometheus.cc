#include "server/prometheus.h"

#include <algorithm>
#include <cstdio>
#include <vector>

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

// The render of one Histogram (engine/metrics.h): cumulative le buckets, +Inf, sum and count.
void histogram(std::string& out, const std::string& name, const std::string& labels, const Histogram& h) {
  const std::string sep = labels.empty() ? "" : ",";
  int64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + num(h.bounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += h.counts.back();
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum{" + labels + "} " + num(h.sum) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
}

// vLLM's own series read from the engine's snapshot: queue, KV and speculative decoding.
void render_vllm_engine(std::string& out, const std::string& L, const EngineMetrics& m) {
  header(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  sample(out, "vllm:num_requests_running", L, m.num_requests_running);
  header(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  sample(out, "vllm:num_requests_waiting", L, m.num_requests_waiting);
  header(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  sample(out, "vllm:kv_cache_usage_perc", L, m.kv_cache_usage_perc);
  header(out, "vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.");
  sample(out, "vllm:prefix_cache_queries_total", L, double(m.prefix_cache_queries));
  header(out, "vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.");
  sample(out, "vllm:prefix_cache_hits_total", L, double(m.prefix_cache_hits));
  header(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  sample(out, "vllm:cache_config_info",
         L + ",block_size=\"" + std::to_string(m.prefix_cache_block_tokens) + "\",num_gpu_blocks=\"" +
             std::to_string(m.prefix_cache_capacity_blocks) + "\",enable_prefix_caching=\"" +
             (m.prefix_cache_block_tokens > 0 ? "True" : "False") + "\"",
         1.0);
  header(out, "vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.");
  sample(out, "vllm:spec_decode_num_drafts_total", L, double(m.spec_decode_num_drafts));
  header(out, "vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.");
  sample(out, "vllm:spec_decode_num_draft_tokens_total", L, double(m.spec_decode_num_draft_tokens));
  header(out, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.");
  sample(out, "vllm:spec_decode_num_accepted_tokens_total", L, double(m.spec_decode_num_accepted_tokens));
  header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.");
  const std::vector<int64_t>& per_pos = m.spec_decode_num_accepted_tokens_per_pos;
  for (size_t p = 0; p < per_pos.size(); ++p)
    sample(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", L + ",position=\"" + std::to_string(p) + "\"",
           double(per_pos[p]));
}

struct Series {
  const char* name;  // after "treespark:"; a counter's ends in _total
  const char* type;  // "gauge" or "counter"
  const char* help;
  double value;
};

// treespark's own engine series: KV admission, the load-adaptive policy's latest step and its running counts.
std::vector<Series> treespark_engine_series(const EngineMetrics& m) {
  const StepReport& s = m.last_step;
  double theta = 0, tree = 0;
  int speculating = 0;
  for (const RoundDecision& d : s.decisions) {
    if (!d.speculate) continue;
    ++speculating;
    theta += d.theta;
    tree += d.tree_size;
  }
  const double share = m.decode_steps > 0 ? double(m.speculative_steps) / double(m.decode_steps) : 0.0;
  return {
      {"kv_reserved_perc", "gauge", "KV rows reserved by admitted requests / the KV budget, 0..1.", m.kv_reserved_perc},
      {"kv_budget_bytes", "gauge", "KV memory all admitted requests may reserve together.", double(m.kv_budget_bytes)},
      {"prefix_cache_blocks", "gauge", "Blocks the prefix cache holds (within the KV budget).",
       double(m.prefix_cache_blocks)},
      {"prompt_tokens_computed_total", "counter", "Prompt tokens prefilled by the target (not served from the prefix cache).",
       double(m.prompt_tokens_computed)},
      {"spec_decode_tree_node_ms", "gauge", "Tree growth per draft node, as adaptive trees price it.", m.tree_node_ms},
      {"spec_decode_step_share", "gauge", "Decode steps in which some request speculated / decode steps.", share},
      {"last_step_batch", "gauge", "Requests decoding in the latest step.", double(s.batch)},
      {"last_step_speculating", "gauge", "Requests that speculated in the latest step.", double(speculating)},
      {"last_step_mean_theta", "gauge", "Mean first-node threshold of the latest step's trees.",
       speculating ? theta / speculating : 0.0},
      {"last_step_mean_tree_size", "gauge", "Mean draft nodes of the latest step's trees.",
       speculating ? tree / speculating : 0.0},
      {"mean_decode_batch", "gauge", "Mean batch over the steps that decoded.", m.mean_decode_batch},
      {"spec_decode_predicted_tokens_total", "counter", "Draft tokens the trees' calibrated survivals predicted.",
       m.spec_decode_predicted_tokens},
      {"engine_steps_total", "counter", "Engine steps.", double(m.steps)},
      {"engine_decode_steps_total", "counter", "Engine steps that decoded.", double(m.decode_steps)},
      {"spec_decode_steps_total", "counter", "Decode steps in which some request speculated.",
       double(m.speculative_steps)},
      {"spec_decode_probe_steps_total", "counter", "Steps the policy speculated in to re-measure its prices.",
       double(m.probe_steps)},
      {"spec_decode_plain_probe_steps_total", "counter",
       "Steps the policy ran plain, where speculation paid, to re-measure the plain price.",
       double(m.plain_probe_steps)},
      {"engine_step_seconds_total", "counter", "Wall time inside engine steps.", m.step_ms_total / 1e3},
      {"engine_schedule_seconds_total", "counter", "Of which the scheduler's own work.", m.schedule_ms_total / 1e3},
  };
}

}  // namespace

ServerMetrics::ServerMetrics()
    : ttft_(Histogram::with_bounds(ttft_buckets())),
      itl_(Histogram::with_bounds(inter_token_buckets())),
      e2e_(Histogram::with_bounds(e2e_buckets())) {}

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
  itl_.observe(seconds / n, n);
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

void ServerMetrics::render_requests(std::string& out, const std::string& L) const {
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
  histogram(out, "vllm:time_to_first_token_seconds", L, ttft_);
  header(out, "vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.");
  histogram(out, "vllm:inter_token_latency_seconds", L, itl_);
  header(out, "vllm:e2e_request_latency_seconds", "histogram", "Histogram of end to end request latency in seconds.");
  histogram(out, "vllm:e2e_request_latency_seconds", L, e2e_);
}

std::string ServerMetrics::render(const std::string& model_name, const EngineMetrics* engine, const std::string& state,
                                  int in_flight, int open_connections) const {
  const std::string L = "model_name=\"" + label_escape(model_name) + "\"";
  std::string out;
  out.reserve(8192);
  render_vllm_engine(out, L, engine ? *engine : EngineMetrics{});

  std::lock_guard<std::mutex> lock(mutex_);
  render_requests(out, L);
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
  if (!engine) return out;  // loading: no engine yet
  for (const Series& s : treespark_engine_series(*engine)) {
    header(out, std::string("treespark:") + s.name, s.type, s.help);
    sample(out, std::string("treespark:") + s.name, L, s.value);
  }
  return out;
}

}  // namespace ts::server
