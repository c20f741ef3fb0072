#include "server/engine_backend.h"

namespace ts::server {

EngineBackend::EngineBackend(TargetModel& target, Drafter* drafter, EngineConfig config, RequestOptions defaults)
    : defaults_(std::move(defaults)) {
  auto user_on_step = std::move(config.on_step);
  config.on_step = [this, user_on_step](const StepReport& report) {
    record_step(report);
    if (user_on_step) user_on_step(report);
  };
  engine_ = std::make_unique<AsyncEngine>(target, drafter, std::move(config));
}

EngineBackend::~EngineBackend() { engine_.reset(); }  // joins the loop thread before the members it uses go

void EngineBackend::record_step(const StepReport& report) {
  std::lock_guard<std::mutex> lock(step_mutex_);
  last_step_ = report;
  if (report.batch > 0) {
    ++decode_steps_;
    mean_batch_ += (report.batch - mean_batch_) / double(decode_steps_);
  }
}

SubmitResult EngineBackend::submit(BackendRequest request, EventSink sink) {
  Request r;
  r.prompt = std::move(request.prompt);
  r.options = defaults_;
  r.options.sampling = request.sampling;
  r.options.max_new_tokens = request.max_tokens;
  r.options.stop_ids = std::move(request.stop_ids);
  r.options.logit_bias = std::move(request.logit_bias);
  r.options.min_tokens = request.min_tokens;
  r.options.logprobs = request.logprobs;
  r.options.presence_penalty = request.presence_penalty;
  r.options.frequency_penalty = request.frequency_penalty;
  r.options.repetition_penalty = request.repetition_penalty;
  auto on_event = [sink = std::move(sink)](const RequestEvent& e) {
    if (!e.tokens.empty()) {  // a step's final tokens; on the last step they come before the terminal event
      BackendEvent tokens;
      tokens.ids = e.tokens;
      tokens.logprobs = e.logprobs;
      sink(std::move(tokens));
    }
    if (e.finish == FinishReason::None) return;
    BackendEvent done;
    done.kind = e.finish == FinishReason::Error ? BackendEvent::Kind::Failed : BackendEvent::Kind::Finished;
    done.finish_reason = finish_reason_name(e.finish);
    done.error = e.error;
    if (e.stats) {
      const ts::RequestStats& s = *e.stats;
      done.stats.prompt_tokens = s.prompt_tokens;
      done.stats.generated_tokens = s.generated_tokens;
      done.stats.rounds = s.rounds;
      done.stats.draft_tokens = s.tree_nodes;
      done.stats.accepted_draft_tokens = s.accepted_draft_tokens;
      done.stats.queue_ms = s.queue_ms;
      done.stats.prefill_ms = s.prefill_ms;
      done.stats.decode_ms = s.total_ms - s.prefill_ms;
    }
    sink(std::move(done));
  };
  ts::SubmitResult r0 = engine_->submit(std::move(r), std::move(on_event));
  switch (r0.reason) {
    case RejectReason::None: return {SubmitStatus::Accepted, r0.id, ""};
    case RejectReason::QueueFull: return {SubmitStatus::QueueFull, 0, r0.message};
    case RejectReason::Draining: return {SubmitStatus::Draining, 0, r0.message};
    case RejectReason::BadParams:
    case RejectReason::OverContext: return {SubmitStatus::Invalid, 0, r0.message};
  }
  return {SubmitStatus::Invalid, 0, r0.message};
}

void EngineBackend::cancel(uint64_t id) { engine_->cancel(id); }

void EngineBackend::drain() { engine_->drain(); }

BackendMetrics EngineBackend::metrics() const {
  const EngineMetrics m = engine_->metrics();
  BackendMetrics b;
  b.running = m.num_requests_running;
  b.waiting = m.num_requests_waiting;
  b.kv_cache_usage = m.kv_cache_usage_perc;
  b.spec_drafts = long(m.spec_decode_num_drafts);
  b.spec_draft_tokens = long(m.spec_decode_num_draft_tokens);
  b.spec_accepted_tokens = long(m.spec_decode_num_accepted_tokens);
  b.accepted_per_pos.assign(m.spec_decode_num_accepted_tokens_per_pos.begin(),
                            m.spec_decode_num_accepted_tokens_per_pos.end());
  b.gauges.emplace_back("kv_reserved_perc", m.kv_reserved_perc);
  b.counters.emplace_back("spec_decode_predicted_tokens", m.spec_decode_predicted_tokens);
  b.gauges.emplace_back("kv_budget_bytes", double(m.kv_budget_bytes));
  b.counters.emplace_back("engine_steps", double(m.steps));
  // The load-adaptive policy: decode steps, those that speculated (and their share), and its probes among them.
  b.counters.emplace_back("engine_decode_steps", double(m.decode_steps));
  b.counters.emplace_back("spec_decode_steps", double(m.speculative_steps));
  b.counters.emplace_back("spec_decode_probe_steps", double(m.probe_steps));
  b.gauges.emplace_back("spec_decode_tree_node_ms", m.tree_node_ms);
  b.gauges.emplace_back("spec_decode_step_share",
                        m.decode_steps > 0 ? double(m.speculative_steps) / double(m.decode_steps) : 0.0);
  b.counters.emplace_back("engine_step_seconds", m.step_ms_total / 1e3);
  b.counters.emplace_back("engine_schedule_seconds", m.schedule_ms_total / 1e3);
  std::lock_guard<std::mutex> lock(step_mutex_);
  const StepReport& s = last_step_;
  double theta = 0, tree = 0;
  int speculating = 0;
  for (const RoundDecision& d : s.decisions) {
    if (!d.speculate) continue;
    ++speculating;
    theta += d.theta;
    tree += d.tree_size;
  }
  b.gauges.emplace_back("last_step_batch", s.batch);
  b.gauges.emplace_back("last_step_speculating", speculating);
  b.gauges.emplace_back("last_step_mean_theta", speculating ? theta / speculating : 0.0);
  b.gauges.emplace_back("last_step_mean_tree_size", speculating ? tree / speculating : 0.0);
  b.gauges.emplace_back("mean_decode_batch", mean_batch_);
  return b;
}

}  // namespace ts::server
