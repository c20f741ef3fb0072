// The Backend the server runs on: the batched step engine's thread-safe wrapper (engine/async_engine.h) behind the
// server's interface (backend.h). Both speak the engine's types, so this only forwards; the options every request
// starts from (decode mode, tree, load-adaptive policy) travel with the served model (ServedModel::request_defaults)
// and the policy's latest step is in AsyncEngine's metrics.
#pragma once

#include <memory>

#include "engine/async_engine.h"
#include "server/backend.h"

namespace ts::server {

class EngineBackend : public Backend {
 public:
  // Starts the engine's loop thread. The models must outlive the backend.
  EngineBackend(TargetModel& target, Drafter* drafter, EngineConfig config)
      : engine_(std::make_unique<AsyncEngine>(target, drafter, std::move(config))) {}

  SubmitResult submit(Request request, EventCallback on_event) override {
    return engine_->submit(std::move(request), std::move(on_event));
  }
  void cancel(RequestId id) override { engine_->cancel(id); }
  void drain() override { engine_->drain(); }
  EngineMetrics metrics() const override { return engine_->metrics(); }

  int max_context() const { return engine_->max_context(); }

 private:
  std::unique_ptr<AsyncEngine> engine_;
};

}  // namespace ts::server
