// treespark bench forward: the cost curve L(b, k) of one target forward of k tokens per sequence over a 512-token
// context at batch b, the weight bandwidth at k = 1 against the machine's read bandwidth measured in the same run
// (by a streaming loop, just before each variant's curve), and prefill tokens/s of a 128-token prompt against
// decode tokens/s. --isa avx2,avx512 measures several kernel variants side by side in one run. The load-adaptive
// tree policy (engine/cost_model.h) reads this curve. With two threads or more it also prints, for k = 1 and the
// largest k, where a forward's time goes between the threads (the ops split over them, each thread's work inside
// those, the rest on the caller alone), beside the core-to-core round trip measured just before.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>
#include <x86intrin.h>

#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "decode_flags.h"
#include "engine/cost_cache.h"
#include "engine/cost_curve.h"
#include "engine/model_bundle.h"
#include "kernels/cpu/parallel.h"
#include "kernels/weight_memory.h"
#include "model/drafter.h"
#include "model/random_checkpoint.h"
#include "model/target_model.h"

namespace ts::bench {

// Median ms of a 128-token prefill into an empty cache (logits of the last row only, as generation does).
double measure_prefill_ms(TargetModel& model, int tokens, int reps) {
  const int vocab = model.config().vocab_size;
  ForwardBatch fb;
  for (int i = 0; i < tokens; ++i) {
    fb.tokens.push_back((i * 7919 + 3) % vocab);
    fb.positions.push_back(i);
  }
  fb.logit_rows = {tokens - 1};
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    KVCache cache = model.new_cache(tokens);
    ForwardResult fr;
    const double t0 = now_ms();
    model.forward(fb, {&cache}, &fr);
    if (r > 0) times.push_back(now_ms() - t0);  // the first run warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Where one forward's time goes between the threads, batch 1, k rows over `context` committed tokens (the
// parallel_ranges accounting of kernels/cpu/parallel.h): the ops split over the threads, and how much of their time
// each thread spent working; the rest of the forward ran on the caller alone. Shares of the forward's wall time.
struct ThreadSplit {
  int k = 0;
  double ms = 0, ops = 0;  // per forward
  double in_ops = 0, caller_busy = 0, worker_busy = 0;
};
ThreadSplit measure_thread_split(TargetModel& model, int context, int k, int reps) {
  const int vocab = model.config().vocab_size;
  KVCache cache = model.new_cache(context + k);
  fill_context(model, cache, context, 3);
  ForwardResult fr;
  ForwardBatch fb;
  for (int i = 0; i < k; ++i) {
    fb.tokens.push_back((i * 104729 + 11) % vocab);
    fb.positions.push_back(context + i);
    fb.logit_rows.push_back(i);
  }
  model.forward(fb, {&cache}, &fr);  // warm-up
  cache.drop_pending();
  const int n = std::max(reps, 10);
  kernels::cpu::reset_range_runs();
  const double t0 = now_ms();
  const uint64_t tsc0 = __rdtsc();
  for (int r = 0; r < n; ++r) {
    model.forward(fb, {&cache}, &fr);
    cache.drop_pending();
  }
  const double ms = now_ms() - t0;
  const double ticks = double(__rdtsc() - tsc0);
  const kernels::cpu::RangeRuns runs = kernels::cpu::range_runs();
  ThreadSplit s;
  s.k = k;
  s.ms = ms / n;
  s.ops = double(runs.runs) / n;
  s.in_ops = runs.wall / ticks;
  s.caller_busy = runs.caller_busy / ticks;
  s.worker_busy = runs.worker_busy / ticks / std::max(1, num_threads() - 1);
  return s;
}

struct VariantResult {
  Isa isa;
  std::string format;  // the target's weight format (TargetModel::weight_format)
  double weight_gb = 0;  // packed weights one forward streams
  double bandwidth_gbs = 0, prefill_ms = 0;
  double round_trip_ns = 0;  // a cache line to another core and back, measured just before (core/thread_pool.h)
  CostModel cost;
  std::vector<ThreadSplit> splits;  // batch 1, k = 1 and the largest k (2 threads or more)
};

// The drafter's share of a round, next to the target's decode step (last variant measured): one block forward
// for b sequences at once, and the context extension by n committed tokens (what a round appends).
nlohmann::json bench_drafter(const std::string& dir, TargetModel& target, int context, const std::vector<int>& batches,
                             int reps, const std::vector<VariantResult>& variants) {
  // The drafter in the format it runs beside this target (--drafter-quantize auto).
  const std::string drafter_weights = resolve_drafter_weights("auto", target);
  auto drafter = Drafter::load(dir, target.config(), parse_weight_scheme(drafter_weights));
  const double step_ms = variants.back().cost.ms[0];
  const std::vector<double> block_ms = measure_draft_ms_by_batch(*drafter, context, batches, std::max(reps, 5));
  std::printf("\ndrafter %s (%s weights): block %d, context %d; ISA %s; target decode step (batch 1, k=1) %.2f ms\n",
              dir.c_str(), drafter_weights.c_str(), drafter->block_size(), context, isa_name(variants.back().isa),
              step_ms);
  nlohmann::json j{{"folder", dir}, {"weights", drafter_weights}, {"target_step_ms", step_ms}};
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const double target_b = variants.back().cost.ms[bi * variants.back().cost.tokens.size()];
    std::printf("  block forward, batch %-3d %7.3f ms  (%5.1f%% of the target's k=1 forward at that batch)\n",
                batches[bi], block_ms[bi], 100 * block_ms[bi] / target_b);
    j["block_forward"].push_back({{"batch", batches[bi]}, {"ms", block_ms[bi]}, {"target_k1_ms", target_b}});
  }
  std::vector<float> taps(size_t(context + 64 * (reps + 2)) * drafter->tap_width(), 0.25f);  // [rows, tap_width]
  std::vector<int32_t> positions(context + 64 * (reps + 2));
  std::iota(positions.begin(), positions.end(), 0);
  for (int n : {1, 4, 8}) {
    DrafterState state = drafter->new_state(int(positions.size()) + 1);
    drafter->extend_context(state, taps.data(), positions.data(), context);
    std::vector<double> times;
    int at = context;
    for (int r = 0; r < reps + 1; ++r, at += n) {
      const double t0 = now_ms();
      drafter->extend_context(state, taps.data() + size_t(at) * drafter->tap_width(), positions.data() + at, n);
      if (r > 0) times.push_back(now_ms() - t0);
    }
    std::sort(times.begin(), times.end());
    const double ms = times[times.size() / 2];
    std::printf("  context extension by %d token(s) %7.3f ms\n", n, ms);
    j["extend"].push_back({{"tokens", n}, {"ms", ms}});
  }
  return j;
}

int bench_forward(int argc, char** argv) {
  CLI::App app{"Cost of one target forward of k tokens per sequence over a context, for several batch sizes."};
  std::string model_dir, drafter_dir, json_out = "bench_forward.json", isa_list;
  int context = 512, reps = 5, threads = 0, prefill_tokens = 128;
  std::vector<int> ks = {1, 2, 4, 8, 16, 32, 64}, batches = {1, 2, 4, 8};
  app.add_option("--model", model_dir, "model folder (default: generate a random ~0.5B Qwen3-shaped bf16 model)");
  app.add_option("--context", context, "context tokens per sequence");
  app.add_option("--k", ks, "tokens per sequence per forward")->delimiter(',');
  app.add_option("--batches", batches, "batch sizes")->delimiter(',');
  app.add_option("--reps", reps, "timed repetitions per point (median reported)");
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  app.add_option("--prefill", prefill_tokens, "prompt tokens of the timed prefill (0: skip it)");
  app.add_option("--isa", isa_list,
                 "kernel variants to measure side by side, comma-separated: scalar, avx2, avx512, avx512bf16, amx "
                 "(default: the active one, $TREESPARK_ISA or the best this CPU has)");
  app.add_option("--drafter", drafter_dir,
                 "also time this drafter's round pieces (block forward per batch, context extension) against the "
                 "target's decode step");
  std::string kv_dtype = "auto";
  cli::add_kv_dtype_option(app, &kv_dtype);
  std::string quantize_list = "native";
  app.add_option("--quantize", quantize_list,
                 "weight formats to measure side by side, comma-separated: native (the checkpoint's), q8_0, q4_0, q4_k_m "
                 "(quantized at load)");
  app.add_option("--json", json_out, "write results here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Every figure is relative to k = 1 (the ratios, the weight bandwidth, decode tokens/s), and the cost curve needs
  // two or more ascending token counts: measure k = 1 whatever was asked (and k = 2 if that was all), each k once,
  // in order.
  for (int k : ks) TS_CHECK(k >= 1, "--k: token counts must be >= 1, got ", k);
  for (int b : batches) TS_CHECK(b >= 1, "--batches: batch sizes must be >= 1, got ", b);
  TS_CHECK(!batches.empty(), "--batches: give at least one batch size");
  TS_CHECK(prefill_tokens >= 0, "--prefill: prompt tokens must be >= 0 (0 skips the prefill), got ", prefill_tokens);
  ks.push_back(1);
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  if (ks.size() == 1) ks.push_back(2);  // a curve has two points at least (the cost model checks it)
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<Isa> isas;
  for (size_t pos = 0; pos < isa_list.size();) {
    const size_t comma = std::min(isa_list.find(',', pos), isa_list.size());
    const Isa isa = parse_isa(isa_list.substr(pos, comma - pos));
    TS_CHECK(isa_supported(isa), "--isa ", isa_name(isa), ": this CPU lacks ", missing_features(isa),
             " (supported: ", isa_summary(), ")");
    isas.push_back(isa);
    pos = comma + 1;
  }
  if (model_dir.empty()) {
    model_dir = "build/bench-models/qwen3-0.5b-random";
    if (!file_exists(model_dir + "/model.safetensors")) {
      ModelConfig c = tiny_qwen3_config(32768, 1024, 28);
      c.intermediate_size = 3072;
      c.num_heads = 16;
      c.num_kv_heads = 8;
      c.head_dim = 128;
      c.tie_word_embeddings = true;
      std::fprintf(stderr, "writing a random Qwen3-shaped bf16 model to %s ...\n", model_dir.c_str());
      write_random_model(model_dir, c, DType::BF16, 1);
    }
  }
  std::vector<WeightScheme> schemes;
  for (size_t pos = 0; pos < quantize_list.size();) {
    const size_t comma = std::min(quantize_list.find(',', pos), quantize_list.size());
    schemes.push_back(parse_weight_scheme(quantize_list.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  TS_CHECK(!schemes.empty(), "--quantize: give at least one weight format");
  const auto load_target = [&](WeightScheme scheme) {
    LoadOptions lo;
    lo.weights = scheme;
    auto m = TargetModel::load(model_dir, lo);
    if (const std::optional<DType> kv = parse_kv_dtype(kv_dtype)) m->set_kv_dtype(*kv);
    return m;
  };
  std::unique_ptr<TargetModel> model = load_target(schemes[0]);
  configure_for_model(model->weight_bytes(), threads);
  if (isas.empty()) isas.push_back(active_isa());  // after configure_for_model: the variant this model gets
  const ModelConfig c = model->config();  // a copy: `model` is reloaded per weight format below
  std::fprintf(stderr, "model: %d layers, hidden %d, vocab %d; %s KV cache; %d threads\n", c.num_layers,
               c.hidden_size, c.vocab_size, dtype_name(model->kv_dtype()), num_threads());

  std::fprintf(stderr, "CPU: %s; L3 %.0f MiB; ISA variants supported: %s; weights on huge pages: %s\n",
               cpu_model_name().c_str(), double(l3_cache_bytes()) / (1 << 20), isa_summary().c_str(),
               kernels::weight_hugepages_state());
  if (const MacRates r = bf16_dot_probe(); r.dpbf16_per_ns > 0)
    std::fprintf(stderr, "one core: zmm FMA %.1f MACs/ns, vdpbf16ps %.1f MACs/ns, integer dot (vpdpbusd or its emulation) "
                 "%.1f MACs/ns; default variant %s\n", r.fma_per_ns, r.dpbf16_per_ns,
                 int8_peak_macs_per_ns(Isa::Avx512), isa_name(best_isa()));
  CostCurveOptions opt;
  opt.context = context;
  opt.ks = ks;
  opt.batches = batches;
  opt.reps = reps;
  const auto k_index = [&](int k) -> int {
    for (size_t i = 0; i < ks.size(); ++i)
      if (ks[i] == k) return int(i);
    return -1;
  };
  std::vector<VariantResult> variants;
  nlohmann::json per_isa = nlohmann::json::array();
  for (size_t si = 0; si < schemes.size(); ++si) {
  if (si > 0) {
    model.reset();  // one copy of the weights at a time
    model = load_target(schemes[si]);
  }
  const double weight_gb = double(model->weight_bytes()) / 1e9;
  // Each format's own hint, as a command loading it would set it.
  set_weights_streamed_for_model(model->weight_bytes());
  std::fprintf(stderr, "weights %s: %.3f GB of packed weights per forward%s\n", model->weight_format().c_str(),
               weight_gb, weights_streamed() ? ", streamed from DRAM (more than the L3)" : "");
  for (Isa isa : isas) {
    set_isa(isa);
    VariantResult v;
    v.isa = isa;
    v.format = model->weight_format();
    v.weight_gb = weight_gb;
    v.bandwidth_gbs = ts::measure_read_bandwidth_gbs(size_t(1) << 30);
    if (num_threads() > 1) v.round_trip_ns = core_round_trip_ns();
    v.cost = measure_cost_curve(*model, opt);
    if (num_threads() > 1)
      for (int k : {ks.front(), ks.back()}) v.splits.push_back(measure_thread_split(*model, context, k, reps));
    if (prefill_tokens > 0) v.prefill_ms = measure_prefill_ms(*model, prefill_tokens, std::max(1, reps / 2));
    const CostModel& cost = v.cost;
    std::printf("weights %s, %.3f GB; ISA %s, %d threads, read bandwidth %.1f GB/s measured just before\n",
                v.format.c_str(), weight_gb, isa_name(isa), num_threads(), v.bandwidth_gbs);
    std::printf("%-6s", "batch");
    for (int k : ks) std::printf("  k=%-7d", k);
    std::printf("   (ms per forward; below: ratio to k=1, then ms per row beyond the first, a tree node's price)\n");
    nlohmann::json points = nlohmann::json::array();
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const double* row = &cost.ms[bi * ks.size()];
      std::printf("%-6d", batches[bi]);
      for (size_t ki = 0; ki < ks.size(); ++ki) std::printf("  %-9.2f", row[ki]);
      std::printf("\n%-6s", "");
      // (L(b, k) - L(b, 1)) / (k - 1): what a verified row adds to the step (ks[0] is 1)
      std::vector<double> per_row(ks.size(), 0.0);
      for (size_t ki = 0; ki < ks.size(); ++ki) {
        if (ks[ki] > 1) per_row[ki] = (row[ki] - row[0]) / (ks[ki] - 1);
        std::printf("  x%-8.2f", row[ki] / row[0]);
        points.push_back({{"batch", batches[bi]}, {"k", ks[ki]}, {"ms", row[ki]}, {"ratio_to_k1", row[ki] / row[0]},
                          {"ms_per_extra_row", per_row[ki]}});
      }
      std::printf("\n%-6s", "");
      for (size_t ki = 0; ki < ks.size(); ++ki) {
        if (ks[ki] > 1)
          std::printf("  %+-9.3f", per_row[ki]);  // signed: a noisy curve can dip below k = 1
        else
          std::printf("  %-9s", "-");
      }
      std::printf("\n");
    }
    nlohmann::json splits = nlohmann::json::array();
    if (!v.splits.empty()) {
      std::printf("where a forward's time goes, batch 1, %d threads (core-to-core round trip %.0f ns): the ops split "
                  "over the threads, each thread's work in them, and the rest on the caller alone; %% of the forward\n",
                  num_threads(), v.round_trip_ns);
      std::printf("%-6s %9s %10s %10s %12s %12s %12s\n", "k", "ms", "split ops", "in them", "caller busy",
                  "worker busy", "caller alone");
      for (const ThreadSplit& t : v.splits) {
        std::printf("%-6d %9.3f %10.0f %9.0f%% %11.0f%% %11.0f%% %11.0f%%\n", t.k, t.ms, t.ops, 100 * t.in_ops,
                    100 * t.caller_busy, 100 * t.worker_busy, 100 * (1 - t.in_ops));
        splits.push_back({{"k", t.k}, {"ms", t.ms}, {"split_ops", t.ops}, {"in_split_ops", t.in_ops},
                          {"caller_busy", t.caller_busy}, {"worker_busy", t.worker_busy}});
      }
    }
    const double k1_ms = cost.ms[0];
    const double k1_gbs = weight_gb / (k1_ms / 1e3);
    per_isa.push_back({{"isa", isa_name(isa)},
                       {"weights", v.format},
                       {"weight_gb", weight_gb},
                       {"read_bandwidth_gbs", v.bandwidth_gbs},
                       {"core_round_trip_ns", v.round_trip_ns},
                       {"thread_split", splits},
                       {"k1_weight_gbs", k1_gbs},
                       {"k1_share_of_bandwidth", k1_gbs / v.bandwidth_gbs},
                       {"prefill_tokens", prefill_tokens},
                       {"prefill_ms", v.prefill_ms},
                       {"points", points}});
    variants.push_back(v);
  }
  }
  // Side by side: batch 1 (the first batch size).
  std::printf("\nbatch %d, context %d, %d threads; CPU %s, L3 %.0f MiB\n", batches[0], context, num_threads(),
              cpu_model_name().c_str(), double(l3_cache_bytes()) / (1 << 20));
  std::printf("%-38s %9s %-11s %9s %9s %9s %6s %8s %8s %12s %11s %8s\n", "weights", "MB", "isa", "bw GB/s", "k=1 ms", "wts GB/s", "% bw",
              "k8/k1", "k16/k1", "prefill t/s", "decode t/s", "pf/dec");
  for (const VariantResult& v : variants) {
    const double k1 = v.cost.ms[0];
    const int i8 = k_index(8), i16 = k_index(16);
    const double k1_gbs = v.weight_gb / (k1 / 1e3);
    const double prefill_tps = v.prefill_ms > 0 ? prefill_tokens / (v.prefill_ms / 1e3) : 0, decode_tps = 1e3 / k1;
    char prefill[32] = "-", ratio[32] = "-";  // "-" where the prefill was skipped (--prefill 0)
    if (prefill_tps > 0) {
      std::snprintf(prefill, sizeof prefill, "%.1f", prefill_tps);
      std::snprintf(ratio, sizeof ratio, "%.1fx", prefill_tps / decode_tps);
    }
    std::printf("%-38s %9.2f %-11s %9.1f %9.2f %9.1f %5.0f%% %8s %8s %12s %11.2f %8s\n",
                v.format.c_str(), v.weight_gb * 1e3, isa_name(v.isa), v.bandwidth_gbs, k1,
                k1_gbs, 100 * k1_gbs / v.bandwidth_gbs,
                i8 >= 0 ? cat("x", int(v.cost.ms[i8] / k1 * 100) / 100.0).c_str() : "-",
                i16 >= 0 ? cat("x", int(v.cost.ms[i16] / k1 * 100) / 100.0).c_str() : "-", prefill, decode_tps, ratio);
  }
  // Where the range splits stand after these runs (kernels/cpu/parallel.h): the caller's share times the tasks.
  std::vector<double> shares = kernels::cpu::range_shares();
  std::sort(shares.begin(), shares.end());
  if (!shares.empty())
    std::printf("\nRange splits over %zu call sites: the caller's share x tasks %.2f (min) %.2f (median) %.2f (max); "
                "1 = equal\n", shares.size(), shares.front(), shares[shares.size() / 2], shares.back());
  // The compute floor: what the GEMMs alone would cost at the variant's probed peak (one core's independent-chain
  // multiply-adds per ns, times the threads), against the measured k=1 step. A ratio goal below its floor cannot be
  // met on this machine by any kernel; attention's multiply-adds (a few % at context 512) are left out.
  const double gemm_macs_per_row =
      double(c.num_layers) * c.hidden_size *
          (2.0 * c.num_heads * c.head_dim + 2.0 * c.num_kv_heads * c.head_dim + 3.0 * c.intermediate_size) +
      double(c.vocab_size) * c.hidden_size;
  std::printf("\nGEMM compute floor: %.3f G multiply-adds per row at the probed peak x %d threads (attention not counted)\n",
              gemm_macs_per_row / 1e9, num_threads());
  std::printf("%-11s %-8s %14s %12s %12s %12s %14s\n", "isa", "product", "peak MAC/ns", "k=1 floor ms", "k8/k1 floor", "k16/k1 floor",
              "pf/dec ceiling");
  nlohmann::json floors = nlohmann::json::array();
  for (const VariantResult& v : variants) {
    // Quantized formats (a GGUF type name such as Q4_0 in the format) run the integer GEMM: its peak is vpdpbusd's.
    const bool integer = v.format.find('Q') != std::string::npos;
    const double peak = (integer ? int8_peak_macs_per_ns(v.isa) : gemm_peak_macs_per_ns(v.isa)) * num_threads();
    if (peak <= 0) {
      std::printf("%-11s %-8s %14s\n", isa_name(v.isa), integer ? "int8" : "float", "not probed");
      continue;
    }
    const double k1 = v.cost.ms[0];
    // One table line at `rate` multiply-adds per ns (all threads): a row's GEMM time and the k8 / k16 floors.
    struct Floor {
      double row_ms, k8, k16;
    };
    const auto print_floor = [&](const char* product, double rate) {
      const double row_ms = gemm_macs_per_row / rate / 1e6;  // compute time of one row's GEMMs
      const auto ratio = [&](int k) { return std::max(k1, k * row_ms) / k1; };
      const Floor f{row_ms, ratio(8), ratio(16)};
      std::printf("%-11s %-8s %14.1f %12.2f %11.2fx %11.2fx %13.1fx\n", isa_name(v.isa), product, rate, f.row_ms,
                  f.k8, f.k16, k1 / f.row_ms);
      return f;
    };
    const Floor f = print_floor(integer ? "int8" : "float", peak);
    floors.push_back({{"isa", isa_name(v.isa)},
                      {"product", integer ? "int8" : "float"},
                      {"peak_macs_per_ns", peak},
                      {"k8_floor", f.k8},
                      {"k16_floor", f.k16},
                      {"prefill_over_decode_ceiling", k1 / f.row_ms}});
    // The same at the rate of a tile's whole per-row block work (int8_block_macs_per_ns): the floor a quantized
    // kernel of this design approaches, where the line above counts the integer products alone.
    const double block_rate = integer ? int8_block_macs_per_ns(v.isa) * num_threads() : 0;
    if (block_rate > 0) {
      const Floor b = print_floor("i8 block", block_rate);
      floors.back()["block_macs_per_ns"] = block_rate;
      floors.back()["block_k8_floor"] = b.k8;
      floors.back()["block_k16_floor"] = b.k16;
    }
  }
  nlohmann::json drafter_json;
  if (!drafter_dir.empty()) drafter_json = bench_drafter(drafter_dir, *model, context, batches, reps, variants);
  nlohmann::json out{{"model", model_dir},
                     {"drafter", drafter_json},
                     {"context", context},
                     {"threads", num_threads()},
                     {"range_shares", shares},
                     {"kv_dtype", dtype_name(model->kv_dtype())},
                     {"cpu", cpu_model_name()},
                     {"l3_bytes", l3_cache_bytes()},
                     {"huge_pages", kernels::weight_hugepages_state()},
                     {"variants", per_isa},
                     {"compute_floors", floors}};
  std::ofstream(json_out) << out.dump(2) << "\n";
  std::printf("wrote %s\n", json_out.c_str());
  return 0;
}

}  // namespace ts::bench
