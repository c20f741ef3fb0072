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
  fill_context(target, cache, context, 3);
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

// What measure_serving_cost measures: the options' batches and reps at a context that leaves room for the
// largest k within the model's positions.
ServingCostOptions serving_options(const TargetModel& target, const CostCacheOptions& o) {
  ServingCostOptions so;
  so.batches = o.batches;
  so.reps = o.reps;
  so.long_context = o.long_context;
  const int max_k = *std::max_element(so.ks.begin(), so.ks.end());
  so.context = std::max(1, std::min(o.context, target.config().max_position_embeddings - max_k - 1));
  return so;
}

// The cache file: a hash of everything the curve depends on (model pair, weight format, machine, kernel variant,
// threads, KV dtype) and of what is measured (batches, ks, contexts, reps).
fs::path cache_file(TargetModel& target, const Drafter* drafter, const CostCacheOptions& o,
                    const ServingCostOptions& so) {
  const std::string key =
      cat("v2|", canonical(o.model_dir), "|", canonical(o.drafter_dir), "|", target.weight_format(), "|",
          drafter && drafter->weight_format() != "native" ? "drafter " + drafter->weight_format() + "|" : "",
          target.weight_bytes(), "|",
          cpu_model_name(), "|", isa_name(active_isa()), weights_streamed() ? " streamed" : "", "|", num_threads(), "|",
          dtype_name(target.kv_dtype()), "|b");
  std::string full_key = key;
  for (int b : o.batches) full_key += cat(b, ",");
  full_key += cat("|k", so.ks.size(), "|ctx", so.context, "-", so.long_context, "|reps", o.reps);
  return cache_dir() / cat("cost-", std::hex, std::hash<std::string>{}(full_key), ".json");
}

// The cached curve at `file`, or nothing when caching is off or the entry is missing or unreadable.
std::optional<CostModel> read_cached_curve(const fs::path& file, bool use_cache) {
  std::error_code ec;
  if (!use_cache || !fs::exists(file, ec)) return std::nullopt;
  try {
    return read_cost_model(file.string());
  } catch (const Error&) {
    return std::nullopt;  // unreadable or stale: measured again
  }
}

// A curve measured while the machine was busy is slower than the machine: one quick re-timing of L(1, 1) tells.
// True (and `res` filled from the cache) when the cached curve is kept: it is not slower than now (a cached curve
// faster than now is kept: load only slows). Otherwise `stale` says why it is measured again.
bool keep_cached_curve(TargetModel& target, int context, const CostModel& cached, CostCacheResult& res,
                       std::string& stale) {
  const double now = time_forward(target, context, 1, 5), then = cached.cost_ms(1, 1);
  if (now >= kStaleCacheRatio * then || then - now < kStaleCacheMinMs) {
    res.cost = cached;
    res.from_cache = true;
    res.log = cat("cost curve from ", res.path, " (L(1,1) ", then, " ms, now ", now, " ms)");
    return true;
  }
  stale = cat("the cached curve's L(1,1) ", then, " ms was measured on a busier machine (now ", now, " ms); ");
  return false;
}

// cost = the element-wise minimum of cost and `other` (ms, fixed_ms_by_batch, fixed_ms), made monotone in k again.
void take_elementwise_min(CostModel& cost, const CostModel& other) {
  for (size_t i = 0; i < cost.ms.size(); ++i) cost.ms[i] = std::min(cost.ms[i], other.ms[i]);
  for (size_t i = 0; i < cost.fixed_ms_by_batch.size(); ++i)
    cost.fixed_ms_by_batch[i] = std::min(cost.fixed_ms_by_batch[i], other.fixed_ms_by_batch[i]);
  cost.fixed_ms = std::min(cost.fixed_ms, other.fixed_ms);
  make_monotone_in_k(cost);
}

// Measures the curve into res.cost (with res.read_gbs, res.roofline_ratio, res.attempts) and checks it against the
// roofline and a repeat timing; a curve failing either is measured once more and the element-wise minimum kept.
// `stale_cached`, when given, bounds the first curve's points from above. Returns what was decided, for the log.
std::string measure_checked_curve(TargetModel& target, Drafter* drafter, const ServingCostOptions& so,
                                  const std::optional<CostModel>& stale_cached, CostCacheResult& res) {
  const int max_k = *std::max_element(so.ks.begin(), so.ks.end());
  const size_t probe_bytes = std::clamp<size_t>(2 * target.weight_bytes(), size_t(64) << 20, size_t(1) << 30);
  res.read_gbs = measure_read_bandwidth_gbs(probe_bytes);
  const double roofline_ms = double(target.weight_bytes()) / (res.read_gbs * 1e6);
  std::string why;
  for (res.attempts = 1; res.attempts <= 2; ++res.attempts) {
    CostModel cost = measure_serving_cost(target, drafter, so);
    // Element-wise minimum: interference only ever slows a forward down.
    if (res.attempts == 2) take_elementwise_min(cost, res.cost);
    if (stale_cached && res.attempts == 1) {  // what the stale entry measured still bounds each point from above
      for (size_t i = 0; i < cost.ms.size() && i < stale_cached->ms.size(); ++i)
        cost.ms[i] = std::min(cost.ms[i], stale_cached->ms[i]);
      make_monotone_in_k(cost);
    }
    res.cost = cost;
    const double l11 = cost.cost_ms(1, 1);
    res.roofline_ratio = roofline_ms > 0 ? l11 / roofline_ms : 0;
    const double again_1 = time_forward(target, so.context, 1, so.reps);
    const double again_k = time_forward(target, so.context, max_k, so.reps);
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
  return why;
}

// Writes the curve to `file` unless caching is off; says where it went, for the log.
std::string store_curve(const fs::path& file, const CostModel& cost, bool use_cache) {
  if (!use_cache) return "not cached";
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  try {
    write_cost_model(file.string(), cost);
    return cat("cached at ", file.string());
  } catch (const Error&) {
    return cat("cache ", file.string(), " not writable");
  }
}

}  // namespace

CostCacheResult cached_cost_model(TargetModel& target, Drafter* drafter, const CostCacheOptions& o) {
  TS_CHECK(!o.batches.empty() && o.reps >= 1, "cost cache: need >= 1 batch and >= 1 repetition");
  CostCacheResult res;
  const ServingCostOptions so = serving_options(target, o);
  const fs::path file = cache_file(target, drafter, o, so);
  res.path = file.string();
  const std::optional<CostModel> cached = read_cached_curve(file, o.use_cache);
  std::string stale;
  if (cached && keep_cached_curve(target, so.context, *cached, res, stale)) return res;
  const double t0 = now_ms();
  const std::string why = measure_checked_curve(target, drafter, so, cached, res);
  res.measure_ms = now_ms() - t0;
  const std::string where = store_curve(file, res.cost, o.use_cache);
  res.log = cat(stale, "measured the cost curve in ", int(res.measure_ms), " ms (", res.attempts, " attempt(s)); ", why,
                "; ", where);
  return res;
}

}  // namespace ts
