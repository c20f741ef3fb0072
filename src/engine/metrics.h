// What the engine exposes about itself: a metrics snapshot (gauges, monotonic counters, latency histograms) named
// after vLLM's metrics so the server can print them as Prometheus text under vLLM's names (server/prometheus.h
// renders this struct as it is: there is no server-side copy), and the per-step decision of the load-adaptive
// policy (batch, theta, tree sizes) for logs, plots and /metrics. No transport code here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"

namespace ts {

// A histogram with fixed upper bounds (seconds). counts[i] = observations <= bounds[i] and > bounds[i - 1];
// counts[bounds.size()] = observations above the last bound (Prometheus' +Inf bucket holds count). The engine
// and the server's request metrics (server/prometheus.h) both use it.
struct Histogram {
  std::vector<double> bounds;   // [nb] strictly increasing
  std::vector<int64_t> counts;  // [nb + 1], NOT cumulative (the server accumulates for Prometheus' le buckets)
  double sum = 0;               // sum of observations, seconds
  int64_t count = 0;

  static Histogram with_bounds(std::vector<double> bounds);
  // `times` observations of the same value (n tokens that arrived together, each charged gap / n).
  void observe(double seconds, int64_t times = 1);
};

// vLLM's bucket bounds for time_to_first_token_seconds, inter_token_latency_seconds (with finer ones below 10 ms,
// where a CPU model's inter-token latency lives) and e2e_request_latency_seconds.
std::vector<double> ttft_buckets();
std::vector<double> inter_token_buckets();
std::vector<double> e2e_buckets();

// The load-adaptive policy's decision for one request in one step (cost_model.h explains the price).
struct RoundDecision {
  RequestId id = 0;
  bool speculate = false;   // false: plain decoding this step (mode None, no room, or the policy switched it off)
  double theta = 0;         // threshold of the tree's first node: max(theta floor, adaptive price at this batch)
  int tree_size = 0;        // draft nodes grown (root excluded), 0 when not speculating
  int accepted = 0;         // draft tokens accepted
  // The adaptive policy's price inputs for this request (scheduler DecodeWork): expected tokens per round and rows
  // verified; 0 when the policy did not price it.
  double priced_tokens = 0;
  int priced_rows = 0;
  bool probe_priced = false;  // priced at its class's tokens per round: the request was due its probe
};

struct StepReport {
  int64_t step = 0;
  int batch = 0;             // requests decoding in this step (the b the policy priced with)
  int prefill_requests = 0;  // requests with a prefill chunk in this step
  int prefill_tokens = 0;
  int forward_rows = 0;      // rows of the one target forward
  double step_ms = 0, schedule_ms = 0, draft_ms = 0, expand_ms = 0, forward_ms = 0, verify_ms = 0;
  // The drafter context catching up, before this step's draft, with rows its speculating requests committed in
  // earlier steps (a prompt, plain steps' tokens; part of draft_ms): work deferred from those steps, one row per
  // plain step, so the policy learns a step's cost without it (counted in, a probe after a long plain run looked
  // dearer than rounds are).
  int backlog_rows = 0;
  double backlog_ms = 0;
  // What the policy predicted this decode-only step would cost (the cost model plus the residuals it had learned
  // before the step); 0 when unpriced (no cost model, or prefill in the step).
  double modelled_ms = 0;
  bool probe = false;        // the step speculated to explore, not because it paid (scheduler.h)
  bool plain_probe = false;  // the step ran plain to measure the plain price while speculation paid (scheduler.h)
  std::vector<RoundDecision> decisions;  // one per decoding request
};

// One line of what the policy decided in a decode step and what the step cost, for the debug logs of `serve` and
// `generate` ("treespark policy: step 12 batch 1 predicted 1.4 ms actual 1.5 ms; [3 theta 0.17 nodes 2 acc 1 E 2.4
// k 3] [4 plain E 1.9 k 3] [5 plain E 2.3 k 3 probe-priced]", E and k the price inputs of an adaptive request,
// probe-priced where it was due its probe and priced at its class's E; "batch 7 prefill 64" where the step also
// carried prompt tokens;
// no prediction for a step the load-adaptive policy did not price, e.g. generate's fixed pricing); "" for a step
// without decoding requests.
std::string describe_policy_step(const StepReport& r);

struct EngineMetrics {
  // Gauges.
  int num_requests_running = 0;   // admitted: prefilling or decoding (vLLM num_requests_running)
  int num_requests_waiting = 0;   // queued, not yet admitted (vLLM num_requests_waiting)
  double kv_cache_usage_perc = 0; // KV rows in use (committed + pending) / KV budget rows, in [0, 1]
  double kv_reserved_perc = 0;    // KV rows reserved by admitted requests / budget (what admission checks)
  int64_t kv_budget_bytes = 0;
  // The prefix cache's configuration (vLLM cache_config_info: block size, blocks) and what it holds now; all 0
  // when it is off. prefix_cache_blocks counts within the KV budget with the admitted requests' reservations.
  int prefix_cache_block_tokens = 0;
  int64_t prefix_cache_capacity_blocks = 0;  // the budget in blocks
  int64_t prefix_cache_blocks = 0;

  // Counters since start.
  int64_t prompt_tokens = 0;      // prompt tokens of admitted requests, cached or not (vLLM prompt_tokens_total)
  int64_t prompt_tokens_computed = 0;  // of which prefilled by the target (not served from the prefix cache)
  // Prefix cache (engine/prefix_cache.h), in tokens as vLLM counts them: the prompt tokens of admitted requests
  // (queries) and those whose KV rows came from the cache (hits). 0 with the cache off.
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  // Wall time of the prefix cache's own work (lookups, copying rows into its pool, eviction), within step_ms_total.
  double prefix_cache_ms_total = 0;
  double prefix_cache_copy_ms_total = 0;  // of which copying requests' rows into the pool (requests read it in place)
  int64_t generation_tokens = 0;  // tokens emitted (vLLM generation_tokens_total)
  int64_t requests_finished[5] = {0, 0, 0, 0, 0};  // indexed by FinishReason
  int64_t spec_decode_num_drafts = 0;           // speculative rounds
  int64_t spec_decode_num_draft_tokens = 0;     // draft nodes verified (tree nodes, root excluded)
  int64_t spec_decode_num_accepted_tokens = 0;  // draft tokens accepted
  // Sum of the verified trees' calibrated path survivals (root excluded): the draft tokens the calibration in use
  // expected to be accepted. Beside spec_decode_num_accepted_tokens it shows how well the trees are priced.
  double spec_decode_predicted_tokens = 0;
  // [block_size]: position p (0-based) counts rounds whose accepted path reached depth p + 1 (vLLM's
  // spec_decode_num_accepted_tokens_per_pos{position=p}).
  std::vector<int64_t> spec_decode_num_accepted_tokens_per_pos;
  int64_t steps = 0;
  // Steps that decoded (some request made a token without prefilling), those in which some request speculated,
  // and the policy's probes among them (rounds run to re-measure prices that kept speculation off: scheduler.h).
  // speculative_steps / decode_steps is the share of steps that speculated. plain_probe_steps: decode steps run
  // plain to measure the plain price where speculation paid (scheduler.h, step 7).
  int64_t decode_steps = 0, speculative_steps = 0, probe_steps = 0, plain_probe_steps = 0;
  double tree_node_ms = 0;        // gauge: tree growth per draft node, as adaptive trees price it
  double step_ms_total = 0;       // wall time inside Engine::step()
  double schedule_ms_total = 0;   // of which the scheduler's own work (schedule + update + bookkeeping)

  Histogram time_to_first_token = Histogram::with_bounds(ttft_buckets());   // seconds, from add()
  // Seconds per output token after the first: a step that makes n tokens of a request final adds n observations
  // of (time since that request's previous tokens) / n.
  Histogram inter_token_latency = Histogram::with_bounds(inter_token_buckets());

  // What the load-adaptive policy decided last, and the mean decode batch over the steps that decoded (batch >
  // 0). Engine::step() returns its report and Engine::metrics() leaves these empty; AsyncEngine, which runs the
  // steps, keeps them in the snapshot it publishes.
  StepReport last_step;
  double mean_decode_batch = 0;
};

}  // namespace ts
