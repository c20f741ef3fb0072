// Internal: how the kernels split work over threads (core/thread_pool.h). Small calls never reach the pool: a hand-off
// to a spinning worker costs a fraction of a microsecond (more when the worker sleeps or its core is busy), and a
// tiny model's decode step runs ~60 kernels (docs/results/optimization-notes.md, "Thread hand-off cost").
// Splits only ever assign whole rows / column groups / vectors to tasks, so results never depend on the threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace ts::kernels::cpu {

// Tasks per thread for range splits: one contiguous range each, as a static split would give. The claiming alone keeps
// a descheduled thread from stalling the op (the caller takes its range if it has not started). Four per thread were no
// better beside a busy process and slower on multi-row forwards: the GEMM prefetches the next column group of its own
// range, which smaller, interleaved ranges break more often (docs/results/optimization-notes.md, "Range splits: one
// task per thread").
constexpr int64_t kTasksPerThread = 1;

// body(begin, end) over [0, n) in contiguous ranges, handed out to the pool's threads; on the calling thread
// alone when `worth_it` is false, n < 2 or the pool has one thread.
template <typename Body>
inline void parallel_ranges(int64_t n, bool worth_it, const Body& body) {
  const int threads = worth_it && n > 1 ? pool_threads() : 1;
  if (threads <= 1) {
    if (n > 0) body(int64_t(0), n);
    return;
  }
  const int64_t tasks = std::min<int64_t>(n, threads * kTasksPerThread);
  pool_run(tasks, [&](int64_t t) {
    const int64_t begin = n * t / tasks, end = n * (t + 1) / tasks;
    if (begin < end) body(begin, end);
  });
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
