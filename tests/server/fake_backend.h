// A Backend that generates scripted tokens on its own thread, for testing the HTTP layer without a model:
// at most max_running requests run, up to max_waiting more wait; every tick each running request emits the next
// tokens_per_event ids of its script (a speculative round delivers several at once). A prompt holding fail_id
// fails after two events, the way an exception inside a real backend must surface: as that request's Failed
// event, with the others unaffected.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "server/backend.h"

namespace ts::server::testing {

// The logprobs the fake backend reports for token number n (id): logprob -0.5 * (n % 4) - 0.125, and the top k
// are id, id + 1, ... at that logprob minus 0, 1, ...
inline TokenLogprobs fake_logprobs(int32_t id, int n, int k) {
  TokenLogprobs lp;
  lp.logprob = -0.5f * float(n % 4) - 0.125f;
  for (int j = 0; j < k; ++j) lp.top.emplace_back(id + j, lp.logprob - float(j));
  return lp;
}

struct FakeBackendOptions {
  int max_running = 4;
  int max_waiting = 16;
  int tick_ms = 5;
  int tokens_per_event = 1;
  int32_t fail_id = -1;                       // a prompt holding this id fails mid-generation
  std::vector<int32_t> script;                // ids every request emits (cycled), unless `script_for` is set
  std::function<std::vector<int32_t>(const BackendRequest&)> script_for;
};

class FakeBackend : public Backend {
 public:
  explicit FakeBackend(FakeBackendOptions options) : options_(std::move(options)) {
    worker_ = std::thread([this] { loop(); });
  }
  ~FakeBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }

  SubmitResult submit(BackendRequest request, EventSink sink) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) return {SubmitStatus::Draining, 0, "draining"};
    if (int(waiting_.size()) >= options_.max_waiting) return {SubmitStatus::QueueFull, 0, "fake queue full"};
    Job job;
    job.id = next_id_++;
    job.script = options_.script_for ? options_.script_for(request) : options_.script;
    job.request = std::move(request);
    job.sink = std::move(sink);
    submitted_.push_back(job.request);
    waiting_.push_back(std::move(job));
    changed_.notify_all();
    return {SubmitStatus::Accepted, next_id_ - 1, ""};
  }

  void cancel(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_requests_.push_back(id);
  }

  void drain() override {
    std::unique_lock<std::mutex> lock(mutex_);
    draining_ = true;
    changed_.wait(lock, [&] { return waiting_.empty() && running_.empty(); });
  }

  BackendMetrics metrics() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    BackendMetrics m = counters_;
    m.running = int(running_.size());
    m.waiting = int(waiting_.size());
    m.kv_cache_usage = double(running_.size()) / options_.max_running;
    m.gauges = {{"fake_gauge", 42}};
    m.counters = {{"fake_events", 7}};
    return m;
  }

  int cancelled() const { return cancelled_.load(); }
  std::vector<BackendRequest> submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }

 private:
  struct Job {
    uint64_t id = 0;
    BackendRequest request;
    EventSink sink;
    std::vector<int32_t> script;
    int emitted = 0, events = 0;
    RequestStats stats;
  };

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      changed_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms));
      std::vector<std::pair<EventSink, BackendEvent>> out;  // sent after the lock is released
      for (uint64_t id : cancel_requests_) {
        auto finish = [&](auto& list) {
          for (auto it = list.begin(); it != list.end(); ++it) {
            if (it->id != id) continue;
            BackendEvent e;
            e.kind = BackendEvent::Kind::Finished;
            e.finish_reason = "cancelled";
            e.stats = it->stats;
            out.emplace_back(it->sink, std::move(e));
            list.erase(it);
            cancelled_.fetch_add(1);
            return;
          }
        };
        finish(running_);
        finish(waiting_);
      }
      cancel_requests_.clear();
      while (int(running_.size()) < options_.max_running && !waiting_.empty()) {
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      for (auto it = running_.begin(); it != running_.end();) {
        BackendEvent done;
        if (step(*it, out, done)) {
          out.emplace_back(it->sink, std::move(done));
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      for (auto& [sink, e] : out) sink(std::move(e));
      lock.lock();
      changed_.notify_all();
    }
  }

  // One tick of a request; true when it ended (`done` is its terminal event).
  bool step(Job& job, std::vector<std::pair<EventSink, BackendEvent>>& out, BackendEvent& done) {
    try {
      const bool poisoned = std::find(job.request.prompt.begin(), job.request.prompt.end(), options_.fail_id) !=
                            job.request.prompt.end();
      if (poisoned && job.events >= 2) throw std::runtime_error("injected fault");
      BackendEvent e;
      std::string reason;
      for (int i = 0; i < options_.tokens_per_event && reason.empty(); ++i) {
        const int32_t id = job.script.empty() ? 7 : job.script[size_t(job.emitted) % job.script.size()];
        e.ids.push_back(id);
        if (job.request.logprobs >= 0) e.logprobs.push_back(fake_logprobs(id, job.emitted, job.request.logprobs));
        ++job.emitted;
        if (std::find(job.request.stop_ids.begin(), job.request.stop_ids.end(), id) != job.request.stop_ids.end())
          reason = "stop";
        else if (job.emitted >= job.request.max_tokens)
          reason = "length";
      }
      ++job.events;
      job.stats.prompt_tokens = int(job.request.prompt.size());
      job.stats.generated_tokens = job.emitted;
      job.stats.rounds = job.events;
      job.stats.draft_tokens += 2L * options_.tokens_per_event;
      job.stats.accepted_draft_tokens += long(e.ids.size()) - 1;
      counters_.spec_drafts += 1;
      counters_.spec_draft_tokens += 2L * options_.tokens_per_event;
      counters_.spec_accepted_tokens += long(e.ids.size()) - 1;
      counters_.accepted_per_pos.resize(size_t(options_.tokens_per_event), 0);
      for (size_t p = 0; p + 1 < e.ids.size(); ++p) counters_.accepted_per_pos[p] += 1;
      out.emplace_back(job.sink, std::move(e));
      if (reason.empty()) return false;
      done.kind = BackendEvent::Kind::Finished;
      done.finish_reason = reason;
      done.stats = job.stats;
      return true;
    } catch (const std::exception& ex) {
      done.kind = BackendEvent::Kind::Failed;
      done.error = ex.what();
      done.stats = job.stats;
      return true;
    }
  }

  FakeBackendOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> waiting_;
  std::list<Job> running_;
  std::vector<uint64_t> cancel_requests_;
  std::vector<BackendRequest> submitted_;
  uint64_t next_id_ = 1;
  bool draining_ = false, stopping_ = false;
  BackendMetrics counters_;
  std::atomic<int> cancelled_{0};
  std::thread worker_;
};

}  // namespace ts::server::testing
