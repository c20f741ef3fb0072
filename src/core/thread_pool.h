// The kernels' threads: a fixed team that splits each op into tasks claimed one at a time, where the caller takes
// part and waits only for tasks already started, never for a thread that has not woken up.
//
// Why not OpenMP (which the kernels used before this pool): a parallel region ends at a barrier that every team thread
// must reach, so when the machine is busier than its cores a descheduled thread stalls every op for a scheduler time
// slice. Under libgomp the shipped target's decode step slowed markedly beside one busy process, and
// OMP_WAIT_POLICY=passive, which helps there, costs when the machine is idle (docs/results/optimization-notes.md,
// "Thread pool instead of OpenMP"). Here a thread that has not started by the time the others finish simply finds
// nothing left to claim.
//
// Idle workers spin briefly (ops follow each other within microseconds during a forward), then sleep on a futex
// (std::atomic::wait). Which thread runs which task never changes a result: tasks are whole rows / column groups.
#pragma once

#include <cstdint>

namespace ts {

// Threads the pool uses (the caller included): set_threads(n), else $OMP_NUM_THREADS, else the CPUs this process
// may run on.
int pool_threads();
// The CPUs this process may use, at least 1: its affinity mask, capped by a cgroup CPU quota where one is set
// (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us, rounded up): a container limited to 2 CPUs on a
// 64-core node gets 2, as a Kubernetes CPU limit intends.
int usable_cpus();
// $OMP_NUM_THREADS when it is a positive number, else usable_cpus().
int default_threads();
// The CPUs a cgroup v2 cpu.max line allows ("200000 100000" -> 2, rounded up), or 0 for "max" or anything else.
int cpus_from_cgroup_quota(const char* cpu_max);
// n >= 1: workers are started or stopped to match. Not to be called while another thread runs pool work.
void set_pool_threads(int n);

// task(ctx, i) for every i in [0, n), on the calling thread and up to pool_threads() - 1 workers; returns when all
// have finished. Runs everything on the caller when n < 2, the pool has one thread, the caller is itself a pool
// task, or another thread's run is in progress (two engines in one process never share the team).
void pool_run(int64_t n, void (*task)(const void* ctx, int64_t i), const void* ctx);

// Whether the calling thread is running pool work (a worker, or a caller running its share): a pool_run from here
// runs all its tasks on this thread.
bool in_pool_task();

// Mean time, in ns, of a cache line passed from this thread to a new one and back (a counter each writes in turn,
// `trips` times): what every pool_run's hand-off waits for at least. On some virtual machines it moves between
// ~150 and ~650 ns within minutes (docs/results/optimization-notes.md, "Thread hand-off: cache lines on the
// critical path"), and multi-row forwards, which move more lines between the cores, slow down with it. 0 where
// this process may use one CPU only.
double core_round_trip_ns(int trips = 20000);

template <typename Fn>
inline void pool_run(int64_t n, const Fn& fn) {
  pool_run(n, [](const void* ctx, int64_t i) { (*static_cast<const Fn*>(ctx))(i); }, &fn);
}

}  // namespace ts
