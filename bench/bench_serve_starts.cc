// treespark bench serve starts: does a fresh server speculate, every time? Each start builds a new engine and HTTP
// server over the loaded pair (the policy learns from nothing, as after `treespark serve` starts) and sends the
// prompt set from `clients` closed-loop clients (each sends its share one request after another); the arms
// (plain, TreeSpark) alternate within a start, first arm swapped every start, so drift hits both alike. The
// adaptive arm's cost curve comes from the per-machine cache `serve` reads (engine/cost_cache.h). Per start and
// arm: tokens/s, speculative rounds, the share of decode steps that speculated and the probes; then the ratio.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "bench_serve.h"
#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/cost_cache.h"
#include "engine/model_bundle.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/model_setup.h"

namespace ts::bench {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct StartResult {
  double tok_s = 0;
  long tokens = 0, rounds = 0, failed = 0;
  double step_share = 0;  // decode steps in which some request speculated / decode steps
  long probes = 0;
};

// One fresh server: prompts split over `clients` closed-loop clients, then its counters.
StartResult run_start(ModelBundle& bundle, const RequestOptions& defaults, const std::optional<CostModel>& cost,
                      const std::vector<PromptBody>& prompts, int clients, int max_batch, int max_tokens,
                      float temperature, uint64_t seed) {
  EngineConfig ec;
  ec.max_batch = max_batch;
  ec.max_queue = 64;
  ec.max_context = std::min(1024, bundle.target->config().max_position_embeddings);
  ec.calibration = bundle.calibration;
  ec.cost_model = cost;
  LiveServer live(bundle, ec, defaults);
  const int port = live.port;
  std::vector<Sample> samples(prompts.size());
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (size_t i = size_t(c); i < prompts.size(); i += size_t(clients))
        samples[i] = one_request(port, prompts[i], max_tokens, temperature, seed + i);
    });
  for (auto& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  StartResult r;
  for (const Sample& s : samples) {
    if (!s.ok) {
      ++r.failed;
      continue;
    }
    r.tokens += s.tokens;
    r.rounds += s.rounds;
  }
  r.tok_s = wall_s > 0 ? double(r.tokens) / wall_s : 0;
  const EngineMetrics m = live.backend.metrics();
  r.probes = long(m.probe_steps);
  r.step_share = m.decode_steps > 0 ? double(m.speculative_steps) / double(m.decode_steps) : 0;
  return r;
}

}  // namespace

int bench_serve_starts(int argc, char** argv) {
  CLI::App app{"Fresh servers one after another: plain decoding against TreeSpark (load-adaptive trees), arms "
               "alternated within each start."};
  std::string model_dir, drafter_dir, prompts_path, json_out = "bench_serve_starts.json";
  int starts = 10, clients = 1, max_batch = 8, max_tokens = 64, limit = 12, threads = 0;
  float temperature = 0;
  uint64_t seed = 1;
  app.add_option("--model", model_dir, "target model folder")->required();
  app.add_option("--drafter", drafter_dir, "drafter folder")->required();
  app.add_option("--prompts", prompts_path, "JSONL of {\"prompt\"} or {\"messages\"} (default: 5 built-in prompts)");
  app.add_option("--limit", limit, "use the first N prompts (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--starts", starts, "fresh starts per arm")->check(CLI::PositiveNumber);
  app.add_option("--clients", clients, "closed-loop clients sending at once")->check(CLI::PositiveNumber);
  app.add_option("--max-batch", max_batch, "the server's max batch")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "tokens per request")->check(CLI::PositiveNumber);
  app.add_option("--temperature", temperature, "sampling temperature of every request");
  app.add_option("--seed", seed, "sampling seed");
  app.add_option("--threads", threads, "model threads (0 = $OMP_NUM_THREADS, else every CPU the process may use)");
  std::string quantize = "native";
  cli::add_quantize_option(app, &quantize);
  app.add_option("--json", json_out, "results");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<PromptBody> prompts = load_prompts(prompts_path);
  if (limit > 0 && int(prompts.size()) > limit) prompts.resize(size_t(limit));
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, quantize);
  TS_CHECK(bundle.drafter, "bench serve starts needs --drafter");
  configure_for_model(bundle.target->weight_bytes(), threads);
  CostCacheOptions co;  // what `treespark serve` reads at start-up
  co.model_dir = model_dir;
  co.drafter_dir = drafter_dir;
  co.batches = server::batch_ladder(max_batch);
  const CostCacheResult measured = cached_cost_model(*bundle.target, bundle.drafter.get(), co);
  std::fprintf(stderr, "%s\n", measured.log.c_str());

  RequestOptions plain;
  plain.mode = DecodeMode::None;
  RequestOptions tree;  // the serve defaults
  tree.mode = DecodeMode::Tree;
  tree.tree.theta = 0.05;
  tree.tree.node_cap = 32;
  tree.tree.branch_cap = 4;
  tree.tree.draft_len = bundle.drafter->block_size() - 1;
  tree.adaptive = true;

  std::printf("bench serve starts: %s; %zu prompts x %d tokens, %d client(s), T = %.2f, %d threads, ISA %s\n",
              cpu_model_name().c_str(), prompts.size(), max_tokens, clients, temperature, num_threads(),
              isa_name(active_isa()));
  std::printf("%-6s %12s %12s %8s %10s %10s %7s\n", "start", "plain tok/s", "tree tok/s", "ratio", "rounds",
              "spec share", "probes");
  json rows = json::array();
  std::vector<double> ratios;
  for (int s = 0; s < starts; ++s) {
    StartResult none, adaptive;
    for (int half = 0; half < 2; ++half) {
      const bool tree_now = (half == 0) == (s % 2 == 1);
      StartResult& r = tree_now ? adaptive : none;
      r = run_start(bundle, tree_now ? tree : plain, tree_now ? std::optional(measured.cost) : std::nullopt, prompts,
                    clients, max_batch, max_tokens, temperature, seed);
    }
    const double ratio = none.tok_s > 0 ? adaptive.tok_s / none.tok_s : 0;
    ratios.push_back(ratio);
    std::printf("%-6d %12.1f %12.1f %7.2fx %10ld %9.0f%% %7ld%s\n", s + 1, none.tok_s, adaptive.tok_s, ratio,
                adaptive.rounds, 100 * adaptive.step_share, adaptive.probes,
                none.failed + adaptive.failed ? "  (failed requests)" : "");
    rows.push_back({{"start", s + 1}, {"plain_tok_s", none.tok_s}, {"tree_tok_s", adaptive.tok_s}, {"ratio", ratio},
                    {"rounds", adaptive.rounds}, {"spec_step_share", adaptive.step_share},
                    {"probes", adaptive.probes}, {"failed", none.failed + adaptive.failed}});
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  std::printf("ratio over %d fresh starts: min %.2fx, median %.2fx, max %.2fx\n", starts, sorted.front(),
              sorted[sorted.size() / 2], sorted.back());
  std::ofstream(json_out) << json{{"cpu", cpu_model_name()}, {"clients", clients}, {"temperature", temperature},
                                  {"max_tokens", max_tokens}, {"prompts", prompts.size()}, {"rows", rows}}
                                 .dump(1)
                          << "\n";
  return 0;
}

}  // namespace ts::bench
