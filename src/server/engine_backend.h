// The Backend the server runs on: an adapter from the server's interface (backend.h) to the batched step engine's
// thread-safe wrapper (engine/async_engine.h). It owns the AsyncEngine, fills each request's options from the
// server-wide defaults (decode mode, tree parameters, load-adaptive policy) plus the client's sampling parameters,
// maps engine events and rejections, and records the latest step's policy decision (batch, theta, tree size) as
// gauges for /metrics.
#pragma once

#include <memory>
#include <mutex>

#include "engine/async_engine.h"
#include "server/backend.h"

namespace ts::server {

class EngineBackend : public Backend {
 public:
  // `defaults`: options every request starts from (mode, tree, adaptive); sampling, max_new_tokens and stop_ids
  // come from the request. config.on_step, if set, is still called. The models must outlive the backend.
  EngineBackend(TargetModel& target, Drafter* drafter, EngineConfig config, RequestOptions defaults);
  ~EngineBackend() override;

  SubmitResult submit(BackendRequest request, EventSink sink) override;
  void cancel(uint64_t id) override;
  void drain() override;
  BackendMetrics metrics() const override;

  int max_context() const { return engine_->max_context(); }

 private:
  void record_step(const StepReport& report);

  RequestOptions defaults_;
  mutable std::mutex step_mutex_;
  StepReport last_step_;             // guarded by step_mutex_
  double mean_batch_ = 0;            // running mean of the decode batch over steps with decoding
  long decode_steps_ = 0;
  std::unique_ptr<AsyncEngine> engine_;  // last: its loop thread calls record_step
};

}  // namespace ts::server
