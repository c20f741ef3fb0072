// Internal: how the kernels split work over threads (core/thread_pool.h). Small calls never reach the pool: a hand-off
// to a spinning worker costs a fraction of a microsecond (more when the worker sleeps or its core is busy), and a
// tiny model's decode step runs ~60 kernels (docs/results/optimization-notes.md, "Thread hand-off cost").
// Splits only ever assign whole rows / column groups / vectors to tasks, so results never depend on the threads.
#pragma once

#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace ts::kernels::cpu {

// Tasks per thread for range splits: one contiguous range each, as a static split would give. The claiming alone keeps
// a descheduled thread from stalling the op (the caller takes its range if it has not started). Four per thread were no
// better beside a busy process and slower on multi-row forwards: the GEMM prefetches the next column group of its own
// range, which smaller, interleaved ranges break more often (docs/results/optimization-notes.md, "Range splits: one
// task per thread").
constexpr int64_t kTasksPerThread = 1;

// The caller's share of a call site's ranges. The pool's caller always runs task 0 (core/thread_pool.h), the workers
// the others. Where the threads do not run a range at the same speed (a virtual CPU whose host core is shared, a
// stacked product whose parts cost differently per column group), equal ranges leave the faster thread waiting at
// the end of every op. Each call site keeps the share with which its recent runs would have finished together
// (docs/results/optimization-notes.md, "Range splits: the caller's share follows the threads' speeds").
struct RangeShare {
  static constexpr double kStep = 0.125;  // how far one run moves the share towards its balanced value
  std::atomic<float> caller{0};           // the caller's fraction of the range
  std::atomic<int> tasks{0};              // the task count it was learned for (another count starts at 1 / tasks)
  // What the site's threaded runs cost (range_runs), in rdtsc ticks: each run from the split to its last task's
  // end, and the ticks its tasks ran on the caller and on workers. Added by the caller after each run; runs nested
  // in a pool task (which run alone) are not counted.
  std::atomic<uint64_t> runs{0}, wall_ticks{0}, caller_ticks{0}, worker_ticks{0};
};
// Every call site's share is registered on its first threaded run, so reports can show where the splits stand
// (bench forward prints them): range_shares() gives the caller's share times the task count (1 = an equal split)
// of each site that has run.
struct RangeShareRegistry {
  std::mutex mutex;
  std::vector<RangeShare*> sites;
};
inline RangeShareRegistry& range_share_registry() {
  static RangeShareRegistry* registry = new RangeShareRegistry;  // never destroyed: sites' statics may outlive it
  return *registry;
}
inline void register_range_share(RangeShare* site) {
  RangeShareRegistry& r = range_share_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.sites.push_back(site);
}
inline std::vector<double> range_shares() {
  RangeShareRegistry& r = range_share_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<double> shares;
  for (const RangeShare* site : r.sites) {
    const int tasks = site->tasks.load(std::memory_order_relaxed);
    if (tasks > 0) shares.push_back(double(site->caller.load(std::memory_order_relaxed)) * tasks);
  }
  return shares;
}
// The threaded runs of every call site since the last reset_range_runs(), summed (rdtsc ticks): how long the ops
// split over the threads took, and how much of that the caller and the workers spent in their tasks. A forward's
// time minus `wall` ran on the caller alone; wall minus a thread's busy ticks is that thread waiting in the op.
struct RangeRuns {
  uint64_t runs = 0, wall = 0, caller_busy = 0, worker_busy = 0;
};
inline RangeRuns range_runs() {
  RangeShareRegistry& r = range_share_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  RangeRuns sum;
  for (const RangeShare* site : r.sites) {
    sum.runs += site->runs.load(std::memory_order_relaxed);
    sum.wall += site->wall_ticks.load(std::memory_order_relaxed);
    sum.caller_busy += site->caller_ticks.load(std::memory_order_relaxed);
    sum.worker_busy += site->worker_ticks.load(std::memory_order_relaxed);
  }
  return sum;
}
// Not while another thread runs kernels: the counts of a run in progress may be half cleared.
inline void reset_range_runs() {
  RangeShareRegistry& r = range_share_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (RangeShare* site : r.sites)
    for (std::atomic<uint64_t>* c : {&site->runs, &site->wall_ticks, &site->caller_ticks, &site->worker_ticks})
      c->store(0, std::memory_order_relaxed);
}

// Where task t of `tasks` begins in [0, n) when task 0 takes `share` of it (rounded, at least one unit) and the
// others equal parts of the rest; split_begin(n, tasks, share, tasks) = n. Needs 1 <= tasks <= n.
inline int64_t split_begin(int64_t n, int64_t tasks, double share, int64_t t) {
  if (t == 0) return 0;
  if (t >= tasks) return n;
  const int64_t first = std::clamp<int64_t>(int64_t(share * double(n) + 0.5), 1, n - (tasks - 1));
  return first + (n - first) * (t - 1) / (tasks - 1);
}

// The share with which the caller (caller_units in caller_time) and tasks - 1 workers (worker_units in worker_time,
// their task times summed) would have finished together, moved kStep of the way from `share`, and kept within
// [1/(2 tasks), 2/tasks - 1/(2 tasks)]: a wrong or stale measurement moves it a bounded step that later runs undo.
inline double next_range_share(double share, int64_t tasks, double caller_units, double caller_time,
                               double worker_units, double worker_time) {
  if (!(caller_units > 0 && caller_time > 0 && worker_units > 0 && worker_time > 0)) return share;
  const double caller_speed = caller_units / caller_time, worker_speed = worker_units / worker_time;
  const double balanced = caller_speed / (caller_speed + double(tasks - 1) * worker_speed);
  const double lo = 0.5 / double(tasks), hi = 2.0 / double(tasks) - lo;
  return std::clamp(share + RangeShare::kStep * (balanced - share), lo, hi);
}

// body(begin, end) over [0, n) in contiguous ranges, handed out to the pool's threads; on the calling thread
// alone when `worth_it` is false, n < 2 or the pool has one thread. The caller's range follows its call site's
// RangeShare; each task times its range, and a run in which every task ran where it was meant to (task 0 on the
// caller, the rest on workers) updates the share.
template <typename Body>
inline void parallel_ranges(int64_t n, bool worth_it, const Body& body) {
  const int threads = worth_it && n > 1 ? pool_threads() : 1;
  if (threads <= 1) {
    if (n > 0) body(int64_t(0), n);
    return;
  }
  static RangeShare site;  // one per call site: each call site's body is its own type
  [[maybe_unused]] static const bool registered = (register_range_share(&site), true);
  const int64_t tasks = std::min<int64_t>(n, threads * kTasksPerThread);
  float share = site.caller.load(std::memory_order_relaxed);
  if (share <= 0 || site.tasks.load(std::memory_order_relaxed) != tasks) share = 1.0f / float(tasks);  // new count
  const std::thread::id caller = std::this_thread::get_id();
  const bool nested = in_pool_task();  // pool_run runs every task here: nothing to learn or count
  uint64_t caller_ticks = 0, caller_busy = 0;  // task 0's ticks; all the caller's tasks' ticks
  std::atomic<uint64_t> worker_ticks{0};
  std::atomic<bool> moved{false};  // a task ran on the other kind of thread (the caller took a late worker's range)
  const uint64_t run_start = __rdtsc();
  pool_run(tasks, [&](int64_t t) {
    const int64_t begin = split_begin(n, tasks, share, t), end = split_begin(n, tasks, share, t + 1);
    const uint64_t start = __rdtsc();
    if (begin < end) body(begin, end);
    const uint64_t ticks = __rdtsc() - start;
    if (std::this_thread::get_id() == caller) {
      caller_busy += ticks;
      if (t == 0) caller_ticks = ticks;
      else moved.store(true, std::memory_order_relaxed);
    } else {
      worker_ticks.fetch_add(ticks, std::memory_order_relaxed);
      if (t == 0) moved.store(true, std::memory_order_relaxed);
    }
  });
  if (nested) return;
  // Plain loads and stores, no locked adds: one thread runs the pool at a time, and a count lost to a second caller
  // running alone beside it only blurs a report.
  const auto add = [](std::atomic<uint64_t>& c, uint64_t v) {
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  };
  add(site.runs, 1);
  add(site.wall_ticks, __rdtsc() - run_start);
  add(site.caller_ticks, caller_busy);
  add(site.worker_ticks, worker_ticks.load(std::memory_order_relaxed));
  if (moved.load(std::memory_order_relaxed) || tasks == n) return;
  const int64_t caller_units = split_begin(n, tasks, share, 1);
  site.caller.store(float(next_range_share(share, tasks, double(caller_units), double(caller_ticks),
                                           double(n - caller_units), double(worker_ticks.load()))),
                    std::memory_order_relaxed);
  site.tasks.store(int(tasks), std::memory_order_relaxed);
}

// body(i) for i in [0, n), handed out one at a time (uneven tasks); serial under the same conditions as above.
template <typename Body>
inline void parallel_tasks(int64_t n, bool worth_it, const Body& body) {
  const int threads = worth_it && n > 1 ? pool_threads() : 1;
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  pool_run(n, body);
}

}  // namespace ts::kernels::cpu
