#include "server/serial_backend.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace ts::server {

namespace {
struct Cancelled {};  // thrown from on_token to unwind a cancelled generation
}  // namespace

SerialBackend::SerialBackend(TargetModel& target, Drafter* drafter, spec::CalibrationTable calibration,
                             SerialBackendOptions options)
    : target_(target), drafter_(drafter), calibration_(std::move(calibration)), options_(std::move(options)) {
  TS_CHECK(drafter_ || options_.decode.mode == DecodeMode::None, "speculative decoding needs a drafter");
  if (drafter_) counters_.accepted_per_pos.assign(size_t(drafter_->block_size()), 0);
  worker_ = std::thread([this] { work(); });
}

SerialBackend::~SerialBackend() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    draining_ = true;
    for (auto& job : waiting_) job->cancelled = true;
    if (running_) running_->cancelled = true;
  }
  changed_.notify_all();
  worker_.join();
}

SubmitResult SerialBackend::submit(BackendRequest request, EventSink sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (draining_) return {SubmitStatus::Draining, 0, "draining"};
  if (int(waiting_.size()) >= options_.max_queue + (running_ ? 0 : 1))
    return {SubmitStatus::QueueFull, 0, std::to_string(waiting_.size()) + " requests waiting"};
  auto job = std::make_shared<Job>();
  job->id = next_id_++;
  job->request = std::move(request);
  job->sink = std::move(sink);
  job->submitted_ms = now_ms();
  waiting_.push_back(job);
  changed_.notify_all();
  return {SubmitStatus::Accepted, job->id, ""};
}

void SerialBackend::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (running_ && running_->id == id) running_->cancelled = true;
  for (auto& job : waiting_)
    if (job->id == id) job->cancelled = true;
  changed_.notify_all();
}

void SerialBackend::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  draining_ = true;
  changed_.wait(lock, [&] { return waiting_.empty() && !running_; });
}

BackendMetrics SerialBackend::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  BackendMetrics m = counters_;
  m.running = running_ ? 1 : 0;
  m.waiting = int(waiting_.size());
  const int ctx = std::min(options_.decode.max_context, target_.config().max_position_embeddings);
  m.kv_cache_usage = ctx > 0 ? double(running_context_) / ctx : 0.0;
  return m;
}

void SerialBackend::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      if (waiting_.empty()) return;
      job = waiting_.front();
      waiting_.pop_front();
      running_ = job;
      running_context_ = int(job->request.prompt.size());
    }
    BackendEvent terminal = run(*job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_.reset();
      running_context_ = 0;
    }
    job->sink(std::move(terminal));  // after the slot is free: a client that sees the end sees it released
    changed_.notify_all();
  }
}

BackendEvent SerialBackend::run(Job& job) {
  RequestStats stats;
  stats.prompt_tokens = int(job.request.prompt.size());
  stats.queue_ms = now_ms() - job.submitted_ms;
  BackendEvent terminal;
  terminal.kind = BackendEvent::Kind::Finished;
  GenerateOptions opt = options_.decode;
  opt.sampling = job.request.sampling;
  opt.max_new_tokens = job.request.max_tokens;
  opt.stop_ids = job.request.stop_ids;
  if (opt.sampling.temperature == 0 && opt.mode != DecodeMode::None) opt.tree.temperature = 0;
  auto is_cancelled = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    return job.cancelled;
  };
  try {
    if (is_cancelled()) throw Cancelled{};
    Generator generator(target_, drafter_, calibration_.lookup(opt.sampling.temperature));
    auto on_token = [&](int32_t id) {
      if (is_cancelled()) throw Cancelled{};
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++running_context_;
      }
      ++stats.generated_tokens;
      BackendEvent e;
      e.ids = {id};
      job.sink(std::move(e));
    };
    GenerationResult r = generator.generate(job.request.prompt, opt, on_token);
    const GenerationStats& s = r.stats;
    stats.generated_tokens = s.generated_tokens;
    stats.rounds = s.rounds;
    stats.draft_tokens = s.tree_nodes;
    stats.accepted_draft_tokens = s.accepted_draft_tokens;
    stats.prefill_ms = s.prefill_ms;
    stats.decode_ms = s.total_ms - s.prefill_ms;
    terminal.finish_reason = r.finish_reason;
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.spec_drafts += s.rounds;
    counters_.spec_draft_tokens += s.tree_nodes;
    counters_.spec_accepted_tokens += s.accepted_draft_tokens;
    // accepted_at_depth[d]: rounds whose accepted path had length d; position p was accepted when d > p.
    for (size_t d = 1; d < s.accepted_at_depth.size(); ++d)
      for (size_t p = 0; p < d && p < counters_.accepted_per_pos.size(); ++p)
        counters_.accepted_per_pos[p] += s.accepted_at_depth[d];
  } catch (const Cancelled&) {
    terminal.finish_reason = "cancelled";
  } catch (const std::exception& e) {
    terminal.kind = BackendEvent::Kind::Failed;
    terminal.error = e.what();
  }
  terminal.stats = stats;
  return terminal;
}

}  // namespace ts::server
