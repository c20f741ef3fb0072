// A Backend over the single-request Generator: one request runs at a time on a worker thread, the others wait
// in a bounded queue. It serves until the batched step engine's adapter (engine_backend.h) replaces it, and it
// is the reference the engine-backed server is compared with (greedy output must be identical).
// Cancellation takes effect at the next generated token (on_token throws a private exception that unwinds the
// Generator; its KV cache and drafter state are locals, so nothing leaks).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/generator.h"
#include "server/backend.h"
#include "spec/calibration_file.h"

namespace ts::server {

struct SerialBackendOptions {
  GenerateOptions decode;   // mode, tree parameters, max_context; sampling / max tokens / stops come per request
  int max_queue = 64;       // waiting requests beyond the running one
};

class SerialBackend : public Backend {
 public:
  // drafter may be null (then decode.mode must be None). The models must outlive the backend.
  SerialBackend(TargetModel& target, Drafter* drafter, spec::CalibrationTable calibration, SerialBackendOptions options);
  ~SerialBackend() override;

  SubmitResult submit(BackendRequest request, EventSink sink) override;
  void cancel(uint64_t id) override;
  void drain() override;
  BackendMetrics metrics() const override;

 private:
  struct Job {
    uint64_t id;
    BackendRequest request;
    EventSink sink;
    double submitted_ms;
    bool cancelled = false;
  };
  void work();
  BackendEvent run(Job& job);  // generates; returns the terminal event (not yet sent)

  TargetModel& target_;
  Drafter* drafter_;
  spec::CalibrationTable calibration_;
  SerialBackendOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> waiting_;
  std::shared_ptr<Job> running_;
  int running_context_ = 0;    // prompt + generated tokens of the running request
  uint64_t next_id_ = 1;
  bool draining_ = false, stopping_ = false;
  BackendMetrics counters_;    // spec-decoding counters (running / waiting filled in at snapshot time)
  std::thread worker_;
};

}  // namespace ts::server
