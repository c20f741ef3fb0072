// The cost model a command prices trees with: measured once per machine and kept on disk, so that `generate`,
// `serve` and `calibrate` price alike and a server's start-up noise cannot poison its policy for good.
//
// The curve depends on the model pair, its weight format, the machine, the kernel variant, the thread count and the
// KV dtype, not on the prompt. It is kept in $XDG_CACHE_HOME/treespark (else ~/.cache/treespark) under a hash of all of them plus
// the measured batches; an unreadable entry is measured again, an unwritable cache only costs the measurement next
// time.
//
// A measurement is checked before it is kept:
//   - each point is the median of `reps` timed forwards (after a warm-up), the k values round-robin per rep;
//   - roofline: a forward of one token streams the packed weights once, so L(1, 1) is compared with
//     weight_bytes / (the read bandwidth measured just before); more than kMaxRooflineRatio times that means the
//     machine was busy while measuring (checked from kRooflineMinBytes of weights on: a smaller model's step is
//     per-op overhead, not streaming);
//   - repeatability: L(1, 1) and L(1, max k) are timed again after the curve; a point more than kMaxRepeatDrift
//     away from the curve means the same.
// Either way the whole curve is measured once more and the element-wise minimum of the two kept (interference
// only ever makes a forward slower). A cached curve is re-checked at every start: L(1, 1) is timed (5 forwards),
// and a curve whose L(1, 1) is more than 1 / kStaleCacheRatio times that and kStaleCacheMinMs above it (measured
// while the machine was busier than now, where both checks above pass) is measured again and replaced. What was decided is written to the log.
#pragma once

#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/target_model.h"
#include "engine/cost_model.h"

namespace ts {

struct CostCacheOptions {
  std::string model_dir, drafter_dir;  // part of the key (canonical paths)
  std::vector<int> batches = {1};      // measured batches; F(b) is measured at each when there is a drafter
  int context = 256;                   // clamped to the model's positions
  int long_context = 1024;             // the context term's second context (0: none)
  int reps = 7;
  bool use_cache = true;               // false: measure, and write nothing
};

constexpr double kMaxRooflineRatio = 4.0;
constexpr double kMaxRepeatDrift = 0.25;
constexpr size_t kRooflineMinBytes = size_t(32) << 20;
constexpr double kStaleCacheRatio = 0.75;
constexpr double kStaleCacheMinMs = 0.2;  // and by at least this much: microsecond forwards are all noise

struct CostCacheResult {
  CostModel cost;
  std::string path;         // the cache file (read, written, or that would have been)
  bool from_cache = false;
  double measure_ms = 0;    // wall time spent measuring (0 from the cache)
  double read_gbs = 0;      // the streaming read bandwidth measured beside the curve (0 from the cache)
  double roofline_ratio = 0;  // L(1, 1) / (weight bytes / read_gbs)
  int attempts = 0;         // curves measured (2 when the first failed a check)
  std::string log;          // one line: what was decided and why
};

// drafter may be null (no F(b)).
CostCacheResult cached_cost_model(TargetModel& target, Drafter* drafter, const CostCacheOptions& options);

// Read bandwidth in GB/s: a buffer much larger than a typical L3 summed by the kernels' threads, best of a few
// passes, in memory allocated like the packed weights (kernels/weight_memory.h).
double measure_read_bandwidth_gbs(size_t bytes);

}  // namespace ts
