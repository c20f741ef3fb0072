// A thread-safe wrapper of the step engine for serving: a loop thread runs Engine::step() while there is work;
// any thread may submit, cancel, drain and read metrics. No transport code: the server (src/server) maps
// RejectReason to HTTP statuses and RequestEvents to its stream.
//
//   AsyncEngine engine(target, drafter, config);
//   SubmitResult r = engine.submit(request, [&](const RequestEvent& e) { ... });  // e arrives on the loop thread
//   if (!r.ok()) reply(r.reason, r.message);
//   engine.cancel(r.id);   // client went away: slot and KV freed within one step, final event Cancelled
//   engine.drain();        // SIGTERM: new submits get Draining; returns when everything admitted or queued ended
//
// Events for one request arrive in order, on the loop thread, the final one (finish != None) exactly once -- also
// for requests cancelled, failed, or stopped by the destructor (Cancelled). A callback must not block; it may call
// submit() or cancel(). An exception thrown by a callback fails only that request.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace ts {

class AsyncEngine {
 public:
  // Starts the loop thread. The models must outlive this object, and while it lives only its loop thread may
  // run them (a model's forward uses scratch buffers: it is not thread-safe).
  AsyncEngine(TargetModel& target, Drafter* drafter, EngineConfig config = {});
  // Cancels whatever is still queued or running (each gets its final Cancelled event) and joins the loop thread.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates and queues; never blocks on a step. Rejections: BadParams, OverContext, QueueFull (already
  // EngineConfig::max_batch + max_queue requests in progress, queued or running), Draining.
  SubmitResult submit(Request request, EventCallback on_event);

  // Frees the request's slot and KV within one step (final event Cancelled). Unknown / finished ids are ignored.
  void cancel(RequestId id);

  // Stops admitting (submit returns Draining from now on) and blocks until every queued and running request has
  // finished. Safe to call more than once and from any thread except the loop thread (i.e. not from a callback).
  void drain();
  bool draining() const { return draining_.load(); }

  // A consistent copy of the metrics after the latest step (requests waiting include those not yet handed to the
  // engine; last_step and mean_decode_batch filled).
  EngineMetrics metrics() const;

  int max_context() const { return engine_.max_context(); }
  const EngineConfig& config() const { return engine_.config(); }

 private:
  struct Pending {
    RequestId id;
    Request request;
    EventCallback on_event;
  };
  void loop();
  void record_step(StepReport report);  // loop thread: the latest step and the running mean decode batch
  void publish_metrics();               // mu_ held: metrics_ = the engine's snapshot plus what record_step kept

  Engine engine_;                    // touched only by the loop thread after construction (validate() is const)
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // loop thread waits for work
  std::condition_variable idle_cv_;  // drain() waits for idleness
  std::deque<Pending> submitted_;    // guarded by mu_
  std::vector<RequestId> cancelled_; // guarded by mu_
  int in_engine_ = 0;                // guarded by mu_: requests submitted and not yet finished
  int finished_in_step_ = 0;         // loop thread only: final events sent during the current step
  EngineMetrics metrics_;            // guarded by mu_
  StepReport last_step_;             // loop thread only: the latest step (Engine::metrics() does not keep it)
  double mean_decode_batch_ = 0;     // loop thread only: mean batch over the decode_steps_ steps with batch > 0
  int64_t decode_steps_ = 0;
  std::atomic<RequestId> next_id_{1};
  std::atomic<bool> draining_{false};
  bool stop_ = false;                // guarded by mu_
  std::thread thread_;
};

}  // namespace ts
