// A Backend that generates scripted tokens on its own thread, for testing the HTTP layer without a model:
// at most max_running requests run, up to max_waiting more wait; every tick each running request emits the next
// tokens_per_event ids of its script (a speculative round delivers several at once), as a RequestEvent of its
// own, and its end as one more event (the real engine may send the last tokens and the finish in one event; the
// engine end-to-end tests cover that shape). A prompt holding fail_id fails after two events, the way an exception inside a real backend
// must surface: as that request's FinishReason::Error event, with the others unaffected.
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
  std::function<std::vector<int32_t>(const Request&)> script_for;
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

  SubmitResult submit(Request request, EventCallback on_event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) return {0, RejectReason::Draining, "draining"};
    if (int(waiting_.size()) >= options_.max_waiting) return {0, RejectReason::QueueFull, "fake queue full"};
    Job job;
    job.id = next_id_++;
    job.script = options_.script_for ? options_.script_for(request) : options_.script;
    job.request = std::move(request);
    job.sink = std::move(on_event);
    submitted_.push_back(job.request);
    waiting_.push_back(std::move(job));
    changed_.notify_all();
    return {next_id_ - 1, RejectReason::None, ""};
  }

  void cancel(RequestId id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_requests_.push_back(id);
  }

  void drain() override {
    std::unique_lock<std::mutex> lock(mutex_);
    draining_ = true;
    changed_.wait(lock, [&] { return waiting_.empty() && running_.empty(); });
  }

  EngineMetrics metrics() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    EngineMetrics m = counters_;
    m.num_requests_running = int(running_.size());
    m.num_requests_waiting = int(waiting_.size());
    m.kv_cache_usage_perc = double(running_.size()) / options_.max_running;
    m.tree_node_ms = 42;  // a gauge with a fixed value
    m.steps = 7;          // a counter with a fixed value
    return m;
  }

  int cancelled() const { return cancelled_.load(); }
  std::vector<Request> submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }

 private:
  struct Job {
    RequestId id = 0;
    Request request;
    EventCallback sink;
    std::vector<int32_t> script;
    int emitted = 0, events = 0;
    RequestStats stats;
  };
  // An event to send once the lock is released; `stats` backs event.stats (the engine's pointer, valid during the
  // callback), set when sent.
  struct Outgoing {
    EventCallback sink;
    RequestEvent event;
    RequestStats stats;
  };
  static Outgoing ending(const Job& job, FinishReason finish, std::string error = "") {
    Outgoing o{job.sink, {}, job.stats};
    o.event.id = job.id;
    o.event.finish = finish;
    o.event.error = std::move(error);
    return o;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      changed_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms));
      std::vector<Outgoing> out;  // sent after the lock is released
      for (RequestId id : cancel_requests_) {
        auto finish = [&](auto& list) {
          for (auto it = list.begin(); it != list.end(); ++it) {
            if (it->id != id) continue;
            out.push_back(ending(*it, FinishReason::Cancelled));
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
        if (step(*it, out)) {
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      for (Outgoing& o : out) {
        o.event.stats = &o.stats;
        o.sink(o.event);
      }
      lock.lock();
      changed_.notify_all();
    }
  }

  // One tick of a request: its tokens event, and its final event when it ended (then true).
  bool step(Job& job, std::vector<Outgoing>& out) {
    const RequestOptions& o = job.request.options;
    try {
      const bool poisoned = std::find(job.request.prompt.begin(), job.request.prompt.end(), options_.fail_id) !=
                            job.request.prompt.end();
      if (poisoned && job.events >= 2) throw std::runtime_error("injected fault");
      RequestEvent e;
      e.id = job.id;
      FinishReason reason = FinishReason::None;
      for (int i = 0; i < options_.tokens_per_event && reason == FinishReason::None; ++i) {
        const int32_t id = job.script.empty() ? 7 : job.script[size_t(job.emitted) % job.script.size()];
        e.tokens.push_back(id);
        if (o.logprobs >= 0) e.logprobs.push_back(fake_logprobs(id, job.emitted, o.logprobs));
        ++job.emitted;
        if (std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end())
          reason = FinishReason::Stop;
        else if (job.emitted >= o.max_new_tokens)
          reason = FinishReason::Length;
      }
      ++job.events;
      const int accepted = int(e.tokens.size()) - 1;
      job.stats.prompt_tokens = int(job.request.prompt.size());
      job.stats.generated_tokens = job.emitted;
      job.stats.rounds = job.events;
      job.stats.tree_nodes += 2L * options_.tokens_per_event;
      job.stats.accepted_draft_tokens += accepted;
      counters_.spec_decode_num_drafts += 1;
      counters_.spec_decode_num_draft_tokens += 2L * options_.tokens_per_event;
      counters_.spec_decode_num_accepted_tokens += accepted;
      counters_.spec_decode_num_accepted_tokens_per_pos.resize(size_t(options_.tokens_per_event), 0);
      for (int p = 0; p < accepted; ++p) counters_.spec_decode_num_accepted_tokens_per_pos[size_t(p)] += 1;
      out.push_back({job.sink, std::move(e), {}});
      if (reason == FinishReason::None) return false;
      out.push_back(ending(job, reason));
      return true;
    } catch (const std::exception& ex) {
      out.push_back(ending(job, FinishReason::Error, ex.what()));
      return true;
    }
  }

  FakeBackendOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> waiting_;
  std::list<Job> running_;
  std::vector<RequestId> cancel_requests_;
  std::vector<Request> submitted_;
  RequestId next_id_ = 1;
  bool draining_ = false, stopping_ = false;
  EngineMetrics counters_;  // the speculative counters the ticks add up
  std::atomic<int> cancelled_{0};
  std::thread worker_;
};

}  // namespace ts::server::testing
