#include "engine/async_engine.h"

namespace ts {

AsyncEngine::AsyncEngine(TargetModel& target, Drafter* drafter, EngineConfig config)
    : engine_(target, drafter, std::move(config)) {
  metrics_ = engine_.metrics();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

SubmitResult AsyncEngine::submit(Request request, EventCallback on_event) {
  SubmitResult r;
  if (draining_.load()) {
    r.reason = RejectReason::Draining;
    r.message = "the server is shutting down and takes no new requests";
    return r;
  }
  try {
    engine_.validate(request);  // const: reads the config and the models' shapes only
  } catch (const RequestRejected& e) {
    r.reason = e.reason();
    r.message = e.what();
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      r.reason = RejectReason::Draining;
      r.message = "the engine is stopping";
      return r;
    }
    const EngineConfig& c = engine_.config();
    if (in_engine_ >= c.max_batch + c.max_queue) {  // the same bound as Engine::add
      r.reason = RejectReason::QueueFull;
      r.message = cat("queue full: ", in_engine_, " requests in progress (max_batch ", c.max_batch, " + max_queue ",
                      c.max_queue, ")");
      return r;
    }
    r.id = next_id_++;
    submitted_.push_back({r.id, std::move(request), std::move(on_event)});
    ++metrics_.num_requests_waiting;
    ++in_engine_;
  }
  work_cv_.notify_one();
  return r;
}

void AsyncEngine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.push_back(id);
  }
  work_cv_.notify_one();
}

void AsyncEngine::drain() {
  draining_.store(true);
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return in_engine_ == 0 || stop_; });
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void AsyncEngine::loop() {
  // Wraps a client's callback: counts the request out after its final event.
  auto wrap = [this](EventCallback cb) {
    return [this, cb = std::move(cb)](const RequestEvent& e) {
      if (e.finish == FinishReason::None) {
        if (cb) cb(e);
        return;
      }
      ++finished_in_step_;  // counted out after the step, together with the metrics it changed
      if (cb) cb(e);
    };
  };
  for (;;) {
    std::deque<Pending> incoming;
    std::vector<RequestId> cancels;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !submitted_.empty() || !cancelled_.empty() || !engine_.idle(); });
      incoming.swap(submitted_);
      cancels.swap(cancelled_);
      stopping = stop_;
    }
    for (Pending& p : incoming) {
      try {
        engine_.add(std::move(p.request), wrap(std::move(p.on_event)), p.id);
      } catch (const std::exception& e) {  // the engine's own queue check (e.g. max_queue 0): fail this one
        RequestEvent last;
        last.id = p.id;
        last.finish = FinishReason::Error;
        last.error = e.what();
        RequestStats none;
        last.stats = &none;
        wrap(std::move(p.on_event))(last);
      }
    }
    for (RequestId id : cancels) engine_.cancel(id);
    if (stopping) {  // cancel everything left; one more step sends the Cancelled events and frees the memory
      engine_.cancel_all();
      record_step(engine_.step());
      std::lock_guard<std::mutex> lock(mu_);
      publish_metrics();
      in_engine_ -= finished_in_step_;
      finished_in_step_ = 0;
      idle_cv_.notify_all();
      return;
    }
    if (!engine_.idle()) record_step(engine_.step());
    {
      std::lock_guard<std::mutex> lock(mu_);
      publish_metrics();
      metrics_.num_requests_waiting += int(submitted_.size());
      in_engine_ -= finished_in_step_;
      finished_in_step_ = 0;
      if (in_engine_ == 0) idle_cv_.notify_all();
    }
  }
}

void AsyncEngine::record_step(StepReport report) {
  if (report.batch > 0) {
    ++decode_steps_;
    mean_decode_batch_ += (report.batch - mean_decode_batch_) / double(decode_steps_);
  }
  last_step_ = std::move(report);
}

void AsyncEngine::publish_metrics() {
  metrics_ = engine_.metrics();
  metrics_.last_step = last_step_;
  metrics_.mean_decode_batch = mean_decode_batch_;
}

}  // namespace ts
