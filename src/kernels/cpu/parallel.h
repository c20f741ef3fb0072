// Internal: how the kernels split work over OpenMP threads. Small calls never enter a parallel region at all:
// libgomp charges ~1 us even for a region whose if() clause is false, and a tiny model's decode step runs ~60
// kernels (measured on the shipped 4M target at 1 thread: 20% of the time was libgomp before this).
// Splits only ever assign whole rows / column groups / vectors to threads, so results never depend on them.
#pragma once

#include <omp.h>

#include <cstdint>

namespace ts::kernels::cpu {

// body(begin, end) over [0, n) in contiguous static ranges, one per thread; on the calling thread alone when
// `worth_it` is false, n < 2 or OpenMP has one thread.
template <typename Body>
inline void parallel_ranges(int64_t n, bool worth_it, const Body& body) {
  const int threads = worth_it && n > 1 ? omp_get_max_threads() : 1;
  if (threads <= 1) {
    if (n > 0) body(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) body(begin, end);
  }
}

// body(i) for i in [0, n), handed out one at a time (uneven tasks); serial under the same conditions as above.
template <typename Body>
inline void parallel_tasks(int64_t n, bool worth_it, const Body& body) {
  const int threads = worth_it && n > 1 ? omp_get_max_threads() : 1;
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace ts::kernels::cpu
