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
#include "model/random_checkpoint.h"
#include "model/target_model.h"

namespace ts::bench {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Read bandwidth in GB/s: sum over a buffer much larger than the caches, best of a few passes.
double measure_read_bandwidth_gbs(size_t bytes) {
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  std::vector<double> gbs;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_ms();
    float total = 0;
    const long n = long(buf.size());
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (long i = 0; i < n; ++i) total += buf[i];
    const double ms = now_ms() - t0;
    sink = sink + total;
    gbs.push_back(double(bytes) / (ms * 1e6));
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
  set_num_threads(threads);
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
  const ModelConfig& c = model->config();
  const double weight_gb = double(model->weight_bytes()) / 1e9;
  std::fprintf(stderr, "model: %d layers, hidden %d, vocab %d, %.3f GB of packed weights per forward; %d threads\n",
               c.num_layers, c.hidden_size, c.vocab_size, weight_gb, num_threads());

  const double bandwidth = measure_read_bandwidth_gbs(size_t(1) << 30);
  nlohmann::json results = nlohmann::json::array();
  double k1_ms_b1 = 0;
  std::printf("%-6s", "batch");
  for (int k : ks) std::printf("  k=%-7d", k);
  std::printf("   (ms per forward; ratio to k=1 below)\n");
  for (int b : batches) {
    std::vector<KVCache> caches;
    std::vector<KVCache*> ptrs;
    for (int s = 0; s < b; ++s) caches.push_back(model->new_cache(context + 128));
    for (auto& cache : caches) ptrs.push_back(&cache);
    // Fill each sequence's context once (chunked prefill), then time forwards whose rows are dropped after.
    for (int s = 0; s < b; ++s) {
      for (int start = 0; start < context; start += 128) {
        ForwardBatch fb;
        ForwardResult fr;
        for (int i = start; i < std::min(context, start + 128); ++i) {
          fb.tokens.push_back((i * 7919 + s) % c.vocab_size);
          fb.positions.push_back(i);
        }
        std::vector<KVCache*> one(b, nullptr);
        one[0] = ptrs[s];
        model->forward(fb, one, &fr);
        ptrs[s]->commit_all();
      }
    }
    std::vector<double> row_ms;
    for (int k : ks) {
      ForwardBatch fb;
      for (int s = 0; s < b; ++s)
        for (int i = 0; i < k; ++i) {
          fb.tokens.push_back((s * 31 + i * 17) % c.vocab_size);
          fb.positions.push_back(context + i);
          fb.seq.push_back(s);
          fb.logit_rows.push_back(int(fb.tokens.size()) - 1);
        }
      std::vector<double> times;
      for (int r = 0; r < reps + 1; ++r) {
        ForwardResult fr;
        const double t0 = now_ms();
        model->forward(fb, ptrs, &fr);
        const double ms = now_ms() - t0;
        for (auto* cache : ptrs) cache->drop_pending();
        if (r > 0) times.push_back(ms);  // the first run warms up
      }
      const double ms = median(times);
      row_ms.push_back(ms);
      results.push_back({{"batch", b}, {"k", k}, {"ms", ms}, {"ratio_to_k1", ms / row_ms[0]}});
      if (b == 1 && k == 1) k1_ms_b1 = ms;
    }
    std::printf("%-6d", b);
    for (double ms : row_ms) std::printf("  %-9.2f", ms);
    std::printf("\n%-6s", "");
    for (double ms : row_ms) std::printf("  x%-8.2f", ms / row_ms[0]);
    std::printf("\n");
  }
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
