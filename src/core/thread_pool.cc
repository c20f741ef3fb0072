#include "core/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ts {
namespace {

// Pause iterations an idle worker spins before it sleeps: a fraction of a millisecond, longer on cores with a longer
// pause (docs/results/optimization-notes.md, "Thread pool: worker spin length"). Within a forward the next op arrives
// within microseconds; between requests workers sleep.
constexpr int kWorkerSpins = 1 << 14;
// Pause iterations the caller spins on tasks still running elsewhere before it starts yielding its core (which
// helps where a worker holding a task shares that core).
constexpr int kCallerSpins = 1 << 12;

using TaskFn = void (*)(const void*, int64_t);

// Fields are grouped by who writes them, one cache line per group: where moving a line between cores is slow (some
// virtual machines), every line a run moves back and forth is on its critical path (docs/results/
// optimization-notes.md, "Thread hand-off: cache lines on the critical path").
struct Pool {
  // Written by the caller once per run, read by the workers; `state` also takes the workers' claims.
  // (generation << 32) | index of the next task to claim. A run publishes a new generation with task 0 already
  // claimed by the caller; the rest are claimed by compare-exchange, so a claim made from a stale view of an
  // earlier generation fails.
  alignas(64) std::atomic<uint64_t> state{0};
  // The current run's job, written before its generation is published (release) and read after a claim.
  std::atomic<TaskFn> task{nullptr};
  std::atomic<const void*> ctx{nullptr};
  // (generation << 32) | the run's task count, written before its generation is published. A claim checks that
  // the count it compares against is its own run's: a worker that finished the last task of a run and was
  // descheduled before looking again could otherwise read the NEXT run's count (the caller, seeing the run done,
  // may already be setting up the next one) beside the old run's exhausted index, claim a task past the old
  // run's end and run the next run's task function early, outside that run's accounting.
  std::atomic<uint64_t> gen_n{0};

  // Written by the workers: tasks of the current run they finished (the caller counts its own privately).
  alignas(64) std::atomic<int64_t> done{0};

  // Read by the caller every run and by spinning workers every iteration; written rarely.
  alignas(64) std::atomic<int> sleepers{0};  // workers asleep on `state` (or about to be)
  std::atomic<bool> stop{false};

  // Written only when a task throws, and reset by the caller after a run that threw.
  alignas(64) std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception a task threw (guarded by `failed`)

  alignas(64) std::mutex run_mutex;  // one run at a time; a second caller runs its tasks alone
  std::mutex config_mutex;           // workers, threads
  std::vector<std::thread> workers;
  std::atomic<int> threads{0};  // 0 until configured (pool_threads() then picks the default)
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: workers may still sleep on it while the process exits
  return *p;
}

thread_local bool t_in_task = false;  // pool workers, and callers while they run their share

uint32_t generation(uint64_t state) { return uint32_t(state >> 32); }

// Runs task i, recording the first exception any task throws.
void run_task(Pool& p, int64_t i) {
  try {
    p.task.load(std::memory_order_relaxed)(p.ctx.load(std::memory_order_relaxed), i);
  } catch (...) {
    if (!p.failed.exchange(true, std::memory_order_acq_rel)) p.error = std::current_exception();
  }
}

// Claims and runs tasks of generation `gen` until none are left to claim; returns how many it ran. A worker counts
// each on `done` as it finishes; the caller keeps its own count, so its tasks never move that line.
int64_t work(Pool& p, uint32_t gen, bool count_on_done) {
  int64_t ran = 0;
  for (;;) {
    uint64_t s = p.state.load(std::memory_order_acquire);
    if (generation(s) != gen) return ran;
    const int64_t i = int64_t(s & 0xffffffffu);
    const uint64_t gn = p.gen_n.load(std::memory_order_acquire);
    if (generation(gn) != gen || i >= int64_t(gn & 0xffffffffu)) return ran;
    if (!p.state.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) continue;
    // Claimed task i of `gen`: that run cannot finish before this task does, so task/ctx are still its own.
    run_task(p, i);
    ++ran;
    if (count_on_done) p.done.fetch_add(1, std::memory_order_release);
  }
}

// `seen`: the generation when the worker was created. Reading it here instead let a worker that started after
// the caller had published the run it was created for (pool_run starts workers just before publishing) wait for
// the next run: the first run after a start or a resize ran on the caller alone.
void worker_main(Pool* p, uint32_t seen) {
  t_in_task = true;
  for (;;) {
    uint64_t s = p->state.load(std::memory_order_acquire);
    for (int spins = 0; generation(s) == seen; s = p->state.load(std::memory_order_acquire)) {
      if (p->stop.load(std::memory_order_relaxed)) return;
      if (++spins < kWorkerSpins) {
        _mm_pause();
      } else {
        // Until a run (or stop) publishes and notifies. The caller notifies only when it sees a sleeper, and reads
        // `sleepers` right after publishing without a fence, so a worker falling asleep just as a run is published
        // can miss that run: the caller then claims every task itself, and the next run wakes the worker.
        p->sleepers.fetch_add(1, std::memory_order_seq_cst);
        p->state.wait(s, std::memory_order_acquire);
        p->sleepers.fetch_sub(1, std::memory_order_relaxed);
        spins = 0;
      }
    }
    if (p->stop.load(std::memory_order_relaxed)) return;
    seen = generation(s);
    work(*p, seen, true);
  }
}

// Starts or stops workers so that threads - 1 of them run. Caller holds config_mutex.
void resize_locked(Pool& p, int threads) {
  if (int(p.workers.size()) == threads - 1) return;
  if (!p.workers.empty()) {
    p.stop.store(true, std::memory_order_relaxed);
    const uint32_t wake = generation(p.state.load(std::memory_order_relaxed)) + 1;
    p.gen_n.store(uint64_t(wake) << 32, std::memory_order_relaxed);  // nothing to claim in the waking generation
    p.state.store(uint64_t(wake) << 32, std::memory_order_release);  // a generation with no tasks wakes them
    p.state.notify_all();
    for (std::thread& t : p.workers) t.join();
    p.workers.clear();
    p.stop.store(false, std::memory_order_relaxed);
  }
  const uint32_t now = generation(p.state.load(std::memory_order_acquire));
  for (int i = 0; i < threads - 1; ++i) p.workers.emplace_back(worker_main, &p, now);
}

}  // namespace

int cpus_from_cgroup_quota(const char* cpu_max) {
  long long quota = 0, period = 0;
  if (cpu_max == nullptr || std::sscanf(cpu_max, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0)
    return 0;  // "max 100000" fails the first conversion: no limit
  return int(std::min<long long>((quota + period - 1) / period, 1 << 20));
}

namespace {

// The CPU quota of this process's cgroup, in CPUs (0: none or unreadable).
int cgroup_cpu_limit() {
  char line[128] = {};
  if (std::FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r")) {  // cgroup v2 (the root of the process's namespace)
    const bool read = std::fgets(line, sizeof(line), f) != nullptr;
    std::fclose(f);
    if (read) return cpus_from_cgroup_quota(line);
  }
  long long quota = 0, period = 0;  // cgroup v1
  std::FILE* q = std::fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
  std::FILE* p = std::fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
  const bool ok = q && p && std::fscanf(q, "%lld", &quota) == 1 && std::fscanf(p, "%lld", &period) == 1;
  if (q) std::fclose(q);
  if (p) std::fclose(p);
  if (!ok) return 0;
  std::snprintf(line, sizeof(line), "%lld %lld", quota, period);
  return cpus_from_cgroup_quota(line);
}

}  // namespace

int usable_cpus() {
  int cpus = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  const int limit = cgroup_cpu_limit();
  return limit > 0 ? std::min(cpus, limit) : cpus;
}

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return usable_cpus();
}

int pool_threads() {
  Pool& p = pool();
  int n = p.threads.load(std::memory_order_relaxed);
  if (n == 0) {
    std::lock_guard<std::mutex> lock(p.config_mutex);
    if (p.threads.load(std::memory_order_relaxed) == 0) p.threads.store(default_threads(), std::memory_order_relaxed);
    n = p.threads.load(std::memory_order_relaxed);
  }
  return n;
}

void set_pool_threads(int n) {
  if (n < 1) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.config_mutex);
  p.threads.store(n, std::memory_order_relaxed);
  if (!p.workers.empty()) resize_locked(p, n);  // else started by the first run that needs them
}

bool in_pool_task() { return t_in_task; }

double core_round_trip_ns(int trips) {
  if (usable_cpus() < 2 || trips < 1) return 0;
  struct alignas(64) Line {
    std::atomic<int> value{0};
  };
  Line ping, pong;  // one line each: the writer's, read by the other thread (spun on without a pause, as a line's
                    // round trip is what is measured)
  std::thread other([&] {
    for (int i = 1; i <= trips; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) {
      }
      pong.value.store(i, std::memory_order_release);
    }
  });
  // The other thread's first load may wait for it to be scheduled: a few trips unmeasured first.
  const int warm = std::min(trips, 100);
  for (int i = 1; i <= warm; ++i) {
    ping.value.store(i, std::memory_order_release);
    while (pong.value.load(std::memory_order_acquire) != i) {
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = warm + 1; i <= trips; ++i) {
    ping.value.store(i, std::memory_order_release);
    while (pong.value.load(std::memory_order_acquire) != i) {
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  other.join();
  return trips > warm ? ns / (trips - warm) : 0;
}

void pool_run(int64_t n, TaskFn task, const void* ctx) {
  const auto alone = [&] {
    for (int64_t i = 0; i < n; ++i) task(ctx, i);
  };
  if (n < 2 || n >= (int64_t(1) << 32) || t_in_task || pool_threads() < 2) return alone();
  Pool& p = pool();
  std::unique_lock<std::mutex> run_lock(p.run_mutex, std::try_to_lock);
  if (!run_lock.owns_lock()) return alone();
  if (int(p.workers.size()) != pool_threads() - 1) {
    std::lock_guard<std::mutex> lock(p.config_mutex);
    resize_locked(p, p.threads.load(std::memory_order_relaxed));
  }
  p.task.store(task, std::memory_order_relaxed);
  p.ctx.store(ctx, std::memory_order_relaxed);
  const uint32_t gen = generation(p.state.load(std::memory_order_relaxed)) + 1;
  p.gen_n.store((uint64_t(gen) << 32) | uint64_t(n), std::memory_order_relaxed);
  p.done.store(0, std::memory_order_relaxed);
  // Published with task 0 claimed by the caller: it starts on its share at once, with no locked instruction
  // waiting for the workers' copies of these lines to be invalidated.
  p.state.store((uint64_t(gen) << 32) | 1u, std::memory_order_release);
  if (p.sleepers.load(std::memory_order_relaxed) > 0) p.state.notify_all();
  t_in_task = true;
  run_task(p, 0);
  const int64_t own = 1 + work(p, gen, false);
  t_in_task = false;
  for (int spins = 0; p.done.load(std::memory_order_acquire) < n - own;) {
    if (++spins < kCallerSpins) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  if (p.failed.load(std::memory_order_acquire)) {
    std::exception_ptr error = std::move(p.error);
    p.error = nullptr;
    p.failed.store(false, std::memory_order_relaxed);
    std::rethrow_exception(error);
  }
}

}  // namespace ts
