#include "engine/cost_cache.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>

#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/cost_curve.h"
#include "kernels/weight_memory.h"

namespace ts {

__attribute__((optimize("O3"))) double measure_read_bandwidth_gbs(size_t bytes) {
  const kernels::WeightBlock block = kernels::allocate_weight_block(bytes);
  float* buf = static_cast<float*>(block.get());  // [bytes / 4]
  const long n = long(bytes / sizeof(float)) / 64 * 64;
  std::fill(buf, buf + n, 1.0f);
  std::vector<double> gbs;
  volatile float sink = 0;
  const int64_t tasks = num_threads();  // one contiguous range per thread, as the kernels split work
  std::vector<float> partial(static_cast<size_t>(tasks));  // [tasks] per-task sums
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_ms();
    pool_run(tasks, [&](int64_t t) {
      float acc[64] = {};  // 64 independent sums: the loop is bound by memory, not by add latency
      for (long i = n / 64 * t / tasks * 64, end = n / 64 * (t + 1) / tasks * 64; i < end; i += 64)
        for (int j = 0; j < 64; ++j) acc[j] += buf[i + j];
      float total = 0;
      for (float a : acc) total += a;
      partial[size_t(t)] = total;
    });
    const double ms = now_ms() - t0;
    for (float p : partial) sink = sink + p;
    gbs.push_back(double(n) * sizeof(float) / (ms * 1e6));
  }
  return *std::max_element(gbs.begin(), gbs.end());
}

namespace {

namespace fs = std::filesystem;

fs::path cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  return xdg && *xdg ? fs::path(xdg) / "treespark" : fs::path(home && *home ? home : "/tmp") / ".cache/treespark";
}

std::string canonical(const std::string& dir) {
  if (dir.empty()) return "";
  std::error_code ec;
  return fs::weakly_canonical(dir, ec).string();
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of reps batch-1 forwards of k tokens over `context` committed tokens (after one warm-up).
double time_forward(TargetModel& target, int context, int k, int reps) {
  KVCache cache = target.new_cache(context + k);
  const int vocab = target.config().vocab_size;
  for (int start = 0; start < context; start += 128) {
    ForwardBatch fb;
    ForwardResult fr;
    for (int i = start; i < std::min(context, start + 128); ++i) {
      fb.tokens.push_back((i * 7919 + 3) % vocab);
      fb.positions.push_back(i);
    }
    target.forward(fb, {&cache}, &fr);
    cache.commit_all();
  }
  ForwardBatch fb;
  for (int i = 0; i < k; ++i) {
    fb.tokens.push_back((i * 17 + 5) % vocab);
    fb.positions.push_back(context + i);
    fb.seq.push_back(0);
    fb.logit_rows.push_back(i);
  }
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    ForwardResult fr;
    const double t0 = now_ms();
    target.forward(fb, {&cache}, &fr);
    if (r > 0) times.push_back(now_ms() - t0);
    cache.drop_pending();
  }
  return median_ms(times);
}

}  // namespace

CostCacheResult cached_cost_model(TargetModel& target, Drafter* drafter, const CostCacheOptions& o) {
  TS_CHECK(!o.batches.empty() && o.reps >= 1, "cost cache: need >= 1 batch and >= 1 repetition");
  CostCacheResult res;
  ServingCostOptions so;
  so.batches = o.batches;
  so.reps = o.reps;
  so.long_context = o.long_context;
  const int max_k = *std::max_element(so.ks.begin(), so.ks.end());
  so.context = std::max(1, std::min(o.context, target.config().max_position_embeddings - max_k - 1));
  const std::string key =
      cat("v2|", canonical(o.model_dir), "|", canonical(o.drafter_dir), "|", target.weight_format(), "|",
          target.weight_bytes(), "|",
          cpu_model_name(), "|", isa_name(active_isa()), "|", num_threads(), "|", dtype_name(target.kv_dtype()), "|b");
  std::string full_key = key;
  for (int b : o.batches) full_key += cat(b, ",");
  full_key += cat("|k", so.ks.size(), "|ctx", so.context, "-", so.long_context, "|reps", o.reps);
  const fs::path file = cache_dir() / cat("cost-", std::hex, std::hash<std::string>{}(full_key), ".json");
  res.path = file.string();
  std::error_code ec;
  std::optional<spec::CostModel> cached;
  std::string stale;
  if (o.use_cache && fs::exists(file, ec)) {
    try {
      cached = read_cost_model(res.path);
    } catch (const Error&) {
      // unreadable or stale: measured again below
    }
  }
  if (cached) {
    // A curve measured while the machine was busy is slower than the machine: one quick re-timing of L(1, 1)
    // tells, and such a curve is measured again (a cached curve faster than now is kept: load only slows).
    const double now = time_forward(target, so.context, 1, 5), then = cached->cost_ms(1, 1);
    if (now >= kStaleCacheRatio * then || then - now < kStaleCacheMinMs) {
      res.cost = *cached;
      res.from_cache = true;
      res.log = cat("cost curve from ", res.path, " (L(1,1) ", then, " ms, now ", now, " ms)");
      return res;
    }
    stale = cat("the cached curve's L(1,1) ", then, " ms was measured on a busier machine (now ", now, " ms); ");
  }
  const double t0 = now_ms();
  const size_t probe_bytes = std::clamp<size_t>(2 * target.weight_bytes(), size_t(64) << 20, size_t(1) << 30);
  res.read_gbs = measure_read_bandwidth_gbs(probe_bytes);
  const double roofline_ms = double(target.weight_bytes()) / (res.read_gbs * 1e6);
  std::string why;
  for (res.attempts = 1; res.attempts <= 2; ++res.attempts) {
    spec::CostModel cost = measure_serving_cost(target, drafter, so);
    if (res.attempts == 2) {  // element-wise minimum: interference only ever slows a forward down
      for (size_t i = 0; i < cost.ms.size(); ++i) cost.ms[i] = std::min(cost.ms[i], res.cost.ms[i]);
      for (size_t i = 0; i < cost.fixed_ms_by_batch.size(); ++i)
        cost.fixed_ms_by_batch[i] = std::min(cost.fixed_ms_by_batch[i], res.cost.fixed_ms_by_batch[i]);
      cost.fixed_ms = std::min(cost.fixed_ms, res.cost.fixed_ms);
      make_monotone_in_k(cost);
    }
    if (cached && res.attempts == 1) {  // what the stale entry measured still bounds each point from above
      for (size_t i = 0; i < cost.ms.size() && i < cached->ms.size(); ++i)
        cost.ms[i] = std::min(cost.ms[i], cached->ms[i]);
      make_monotone_in_k(cost);
    }
    res.cost = cost;
    const double l11 = cost.cost_ms(1, 1);
    res.roofline_ratio = roofline_ms > 0 ? l11 / roofline_ms : 0;
    const double again_1 = time_forward(target, so.context, 1, o.reps);
    const double again_k = time_forward(target, so.context, max_k, o.reps);
    const double drift = std::max(std::abs(again_1 / l11 - 1), std::abs(again_k / cost.cost_ms(1, max_k) - 1));
    const bool streams = target.weight_bytes() >= kRooflineMinBytes;  // smaller models pay per-op overheads
    if ((!streams || res.roofline_ratio <= kMaxRooflineRatio) && drift <= kMaxRepeatDrift) {
      why = cat("L(1,1) ", l11, " ms = ", res.roofline_ratio, "x the roofline (", target.weight_bytes() / 1e6,
                " MB at ", res.read_gbs, " GB/s), repeat drift ", 100 * drift, "%");
      break;
    }
    why = cat("attempt ", res.attempts, ": L(1,1) ", l11, " ms = ", res.roofline_ratio, "x the roofline, repeat drift ",
              100 * drift, "% (L(1,1) again ", again_1, " ms, L(1,", max_k, ") ", cost.cost_ms(1, max_k), " then ",
              again_k, " ms; limits ", kMaxRooflineRatio, "x, ", 100 * kMaxRepeatDrift, "%)");
    if (res.attempts == 2) {
      why += "; kept the element-wise minimum of two curves";
      break;
    }
  }
  res.attempts = std::min(res.attempts, 2);
  res.measure_ms = now_ms() - t0;
  std::string where = "not cached";
  if (o.use_cache) {
    fs::create_directories(file.parent_path(), ec);
    try {
      write_cost_model(res.path, res.cost);
      where = cat("cached at ", res.path);
    } catch (const Error&) {
      where = cat("cache ", res.path, " not writable");
    }
  }
  res.log = cat(stale, "measured the cost curve in ", int(res.measure_ms), " ms (", res.attempts, " attempt(s)); ", why,
                "; ", where);
  return res;
}

}  // namespace ts
