// The thread pool's hand-off beside the machine's core-to-core latency, in one run: how long a cache line takes to
// go to another core and back (two threads passing a counter), and what a pool_run of one task per thread costs
// over its work (median, p90, p99 of 20k runs, with 1 us of serial work between runs as in a forward).
// A pool_run moves a few lines between cores, so its cost follows the round trip, which on some virtual machines
// changes while they run: compare the columns of one pass, not runs at different times.
// Usage: build/<dir>/bench_pool [threads]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

void spin_for_ns(int64_t ns) {
  const auto start = Clock::now();
  while (std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count() < ns) {
  }
}

struct Overhead {
  double median, p90, p99;
};

// pool_run(threads tasks of work_ns each) minus work_ns, in us.
Overhead pool_overhead_us(int threads, int64_t work_ns) {
  constexpr int kRuns = 20000;
  std::vector<double> us;  // [kRuns]
  us.reserve(kRuns);
  for (int r = 0; r < kRuns; ++r) {
    const auto start = Clock::now();
    ts::pool_run(threads, [&](int64_t) { spin_for_ns(work_ns); });
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() - work_ns * 1e-3);
    spin_for_ns(1000);
  }
  std::sort(us.begin(), us.end());
  return {us[kRuns / 2], us[kRuns * 9 / 10], us[kRuns * 99 / 100]};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(2, std::atoi(argv[1])) : 2;
  ts::set_pool_threads(threads);
  std::printf("pool of %d threads; round trip = a line to another core and back; overhead = pool_run minus its work\n",
              threads);
  std::printf("%-6s %14s %28s %28s\n", "pass", "round trip ns", "overhead us, 0 us of work", "overhead us, 2 us of work");
  for (int pass = 1; pass <= 3; ++pass) {
    const double trip = ts::core_round_trip_ns(100000);
    const Overhead idle = pool_overhead_us(threads, 0), busy = pool_overhead_us(threads, 2000);
    std::printf("%-6d %14.0f %10.2f (p90 %4.2f p99 %4.2f) %10.2f (p90 %4.2f p99 %4.2f)\n", pass, trip, idle.median,
                idle.p90, idle.p99, busy.median, busy.p90, busy.p99);
  }
  return 0;
}
