// treespark bench forward: the cost curve L(b, k) of one target forward of k tokens per sequence over a 512-token
// context at batch b, and the weight bandwidth at k = 1 against the machine's memory bandwidth measured in the
// same run. The load-adaptive tree policy (spec/theta_policy.h) reads this curve.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "engine/cost_curve.h"
#include "model/random_checkpoint.h"
#include "model/target_model.h"

namespace ts::bench {

namespace {

// Read bandwidth in GB/s: sum a buffer much larger than the caches, best of a few passes. Each thread keeps
// 64 independent accumulators so the adds vectorise and the loop is limited by memory, not by add latency.
__attribute__((optimize("O3"))) double measure_read_bandwidth_gbs(size_t bytes) {
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  const long n = long(buf.size()) / 64 * 64;
  std::vector<double> gbs;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_ms();
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      float acc[64] = {};
#pragma omp for schedule(static)
      for (long i = 0; i < n; i += 64)
        for (int j = 0; j < 64; ++j) acc[j] += buf[i + j];
      for (float a : acc) total += a;
    }
    const double ms = now_ms() - t0;
    sink = sink + total;
    gbs.push_back(double(n) * sizeof(float) / (ms * 1e6));
  }
  return *std::max_element(gbs.begin(), gbs.end());
}

}  // namespace

int bench_forward(int argc, char** argv) {
  CLI::App app{"Cost of one target forward of k tokens per sequence over a context, for several batch sizes."};
  std::string model_dir, json_out = "bench_forward.json";
  int context = 512, reps = 5, threads = 0;
  std::vector<int> ks = {1, 2, 4, 8, 16, 32, 64}, batches = {1, 2, 4, 8};
  app.add_option("--model", model_dir, "model folder (default: generate a random ~0.5B Qwen3-shaped bf16 model)");
  app.add_option("--context", context, "context tokens per sequence");
  app.add_option("--k", ks, "tokens per sequence per forward")->delimiter(',');
  app.add_option("--batches", batches, "batch sizes")->delimiter(',');
  app.add_option("--reps", reps, "timed repetitions per point (median reported)");
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  app.add_option("--json", json_out, "write results here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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
  auto model = TargetModel::load(model_dir);
  set_num_threads(threads > 0 ? threads : default_threads_for(model->weight_bytes()));
  const ModelConfig& c = model->config();
  const double weight_gb = double(model->weight_bytes()) / 1e9;
  std::fprintf(stderr, "model: %d layers, hidden %d, vocab %d, %.3f GB of packed weights per forward; %d threads\n",
               c.num_layers, c.hidden_size, c.vocab_size, weight_gb, num_threads());

  const double bandwidth = measure_read_bandwidth_gbs(size_t(1) << 30);
  CostCurveOptions opt;
  opt.context = context;
  opt.ks = ks;
  opt.batches = batches;
  opt.reps = reps;
  const spec::CostModel cost = measure_cost_curve(*model, opt);
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-6s", "batch");
  for (int k : ks) std::printf("  k=%-7d", k);
  std::printf("   (ms per forward; ratio to k=1 below)\n");
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const double* row = &cost.ms[bi * ks.size()];
    std::printf("%-6d", batches[bi]);
    for (size_t ki = 0; ki < ks.size(); ++ki) std::printf("  %-9.2f", row[ki]);
    std::printf("\n%-6s", "");
    for (size_t ki = 0; ki < ks.size(); ++ki) {
      std::printf("  x%-8.2f", row[ki] / row[0]);
      results.push_back({{"batch", batches[bi]}, {"k", ks[ki]}, {"ms", row[ki]}, {"ratio_to_k1", row[ki] / row[0]}});
    }
    std::printf("\n");
  }
  const double k1_ms_b1 = cost.cost_ms(batches[0], 1);
  const double k1_gbs = k1_ms_b1 > 0 ? weight_gb / (k1_ms_b1 / 1e3) : 0;
  std::printf("\nk=1, batch 1: %.2f ms = %.1f GB/s of weights; measured read bandwidth %.1f GB/s -> %.0f%%\n",
              k1_ms_b1, k1_gbs, bandwidth, 100.0 * k1_gbs / bandwidth);
  nlohmann::json out{{"model", model_dir},
                     {"context", context},
                     {"threads", num_threads()},
                     {"weight_gb", weight_gb},
                     {"read_bandwidth_gbs", bandwidth},
                     {"k1_weight_gbs", k1_gbs},
                     {"k1_share_of_bandwidth", k1_gbs / bandwidth},
                     {"points", results}};
  std::ofstream(json_out) << out.dump(2) << "\n";
  std::printf("wrote %s\n", json_out.c_str());
  return 0;
}

}  // namespace ts::bench
