// treespark bench spec: target-only, chains, fixed-size trees, the marginal-ranked tree and TreeSpark (fixed theta,
// and cost-priced with and without the online calibration refit) on one model pair and prompt set, at T = 0 and 1.
// Arms run interleaved prompt by prompt, in an order shuffled per prompt (the machines are shared and noisy), and
// every figure is printed as a ratio to the chain measured in the same run (and to the target alone: 'vs none').
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/cost_curve.h"
#include "engine/model_bundle.h"
#include "prompt_file.h"

namespace ts::bench {

namespace {

struct ArmSpec {
  std::string name;
  DecodeMode mode;
  double theta;
  int node_cap, branch_cap, draft_len;
  int load_batch = 0;  // > 0: load-adaptive theta priced at this batch size
  bool online_calibration = true;  // false: the offline calibration as fitted (RequestOptions::online_calibration)
};

struct ArmTotals {
  long rounds = 0, accepted = 0, generated = 0, nodes = 0;
  double decode_ms = 0, expand_ms = 0, round_ms = 0;
  double predicted = 0;  // sum of the trees' calibrated survivals (RequestStats::predicted_draft_tokens)
  double accepted_per_round() const { return rounds ? double(accepted) / rounds : 0; }
  double tokens_per_round() const { return rounds ? double(accepted + rounds) / rounds : 0; }
  double ms_per_token() const { return generated ? decode_ms / generated : 0; }
};

}  // namespace

int bench_spec(int argc, char** argv) {
  CLI::App app{"Speculative decoding arms side by side: accepted tokens per round and wall clock per token."};
  std::string model_dir, drafter_dir, prompts, json_out = "bench_spec.json";
  std::vector<float> temperatures = {0.0f, 1.0f};
  std::vector<int> chain_lens, fixed_caps = {8, 16, 32}, adaptive_loads = {1, 16};
  int max_tokens = 64, limit = 0, threads = 0, branch_cap = 4;
  double theta = 0.05;
  uint64_t seed = 1;
  app.add_option("--model", model_dir)->required();
  app.add_option("--drafter", drafter_dir)->required();
  app.add_option("--prompts", prompts, "JSONL prompt set")->required();
  app.add_option("--temperatures", temperatures)->delimiter(',');
  int top_k = 0;
  float top_p = 1;
  app.add_option("--top-k", top_k, "target top-k for T > 0 (0 = off); sampled drafts use it too")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "target top-p for T > 0 (1 = off); sampled drafts use it too")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--chain-lens", chain_lens, "chain lengths to try (default 2..block_size-1); the best is the baseline")
      ->delimiter(',');
  app.add_option("--fixed-caps", fixed_caps, "node caps of the fixed-budget trees (theta 0)")->delimiter(',');
  app.add_option("--theta", theta, "TreeSpark theta");
  app.add_option("--adaptive-loads", adaptive_loads,
                 "batch sizes at which to run TreeSpark with the load-adaptive theta (empty: none)")
      ->delimiter(',');
  app.add_option("--branch-cap", branch_cap);
  app.add_option("--max-tokens", max_tokens);
  app.add_option("--limit", limit, "use only the first N prompts");
  app.add_option("--seed", seed);
  app.add_option("--threads", threads);
  std::string quantize = "native", drafter_quantize = "auto";
  cli::add_quantize_option(app, &quantize);
  cli::add_drafter_quantize_option(app, &drafter_quantize);
  app.add_option("--json", json_out);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, quantize, drafter_quantize);
  configure_for_model(bundle.target->weight_bytes(), threads);  // may change the variant: the summary names its GEMM
  std::fprintf(stderr, "%s; %s\n", bundle.weights_summary().c_str(), bundle.calibration_summary().c_str());
  cli::PromptSet set = cli::load_prompt_set(prompts, bundle);
  if (limit > 0 && size_t(limit) < set.prompt_ids.size()) set.prompt_ids.resize(limit);
  const int block = bundle.drafter->block_size();
  if (chain_lens.empty())
    for (int k = 2; k < block; ++k) chain_lens.push_back(k);

  std::vector<ArmSpec> arms = {{"none", DecodeMode::None, 0, 1, 1, 1}};
  for (int k : chain_lens)
    arms.push_back({"chain-" + std::to_string(k), DecodeMode::Chain, 0, k, 1, k});
  for (int n : fixed_caps)
    arms.push_back({"fixed-" + std::to_string(n), DecodeMode::Tree, 0.0, n, branch_cap, 0});
  arms.push_back({"marginal-16", DecodeMode::Marginal, 0.0, 16, branch_cap, 0});
  arms.push_back({"treespark", DecodeMode::Tree, theta, 64, branch_cap, 0});
  for (int load : adaptive_loads) {
    arms.push_back({"adaptive-b" + std::to_string(load), DecodeMode::Tree, 0.0, 64, branch_cap, 0,
                    load});
    // The same without the online refit of the calibration's shift: what the refit buys.
    arms.push_back({"adaptive-b" + std::to_string(load) + "-fixcal", DecodeMode::Tree, 0.0, 64,
                    branch_cap, 0, load, false});
  }
  // The cost curve the adaptive arms price nodes with, measured once here (batch 1 and each load).
  CostModel cost;
  if (!adaptive_loads.empty()) {
    CostCurveOptions co;
    co.context = std::min(256, bundle.target->config().max_position_embeddings - 64);
    co.batches = {1};
    for (int load : adaptive_loads)
      if (load > 1) co.batches.push_back(load);
    std::sort(co.batches.begin(), co.batches.end());
    co.batches.erase(std::unique(co.batches.begin(), co.batches.end()), co.batches.end());
    co.reps = 7;
    co.ks = policy_token_counts();
    co.monotone = true;
    co.long_context = 1024;  // as generate and serve measure it
    cost = measure_cost_curve(*bundle.target, co);
    cost.fixed_ms = measure_draft_ms(*bundle.drafter, co.context);
    std::fprintf(stderr, "adaptive arms' cost curve, b=%d:", cost.batches[0]);
    for (size_t j = 0; j < cost.tokens.size(); ++j) std::fprintf(stderr, " k%d %.2f", cost.tokens[j], cost.ms[j]);
    std::fprintf(stderr, "; F %.2f ms; per context token past %d: %.2f us + %.2f us per extra row\n", cost.fixed_ms,
                 cost.context, cost.ms_per_context_seq * 1e3, cost.ms_per_context_row * 1e3);
  }

  nlohmann::json out = nlohmann::json::array();
  for (float temperature : temperatures) {
    // The calibration fitted under this run's filter (sampled drafts are filtered like the target).
    const spec_decode::DraftFilter filter{temperature > 0 ? top_k : 0, temperature > 0 ? top_p : 1.0f, 0.0f};
    Generator gen(*bundle.target, bundle.drafter.get(), bundle.calibration.lookup(temperature, filter));
    std::vector<ArmTotals> totals(arms.size());
    for (size_t p = 0; p < set.prompt_ids.size(); ++p) {
      std::vector<size_t> order(arms.size());
      std::iota(order.begin(), order.end(), size_t(0));
      std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(seed + p)));
      // Interleaved: every arm on this prompt before the next prompt, in an order shuffled per prompt (seeded by the
      // prompt). In a fixed order an arm paid for the arm before it: the same arm run twice per prompt, once right
      // after the 20-node TreeSpark arm and once after another adaptive arm, was 2-3% slower in the first place in
      // three runs out of three, and kept that with the order rotated (which keeps each arm's predecessor).
      for (size_t i = 0; i < arms.size(); ++i) {
        const size_t a = order[i];
        const ArmSpec& arm = arms[a];
        GenerateOptions o;
        o.sampling.temperature = temperature;
        if (temperature > 0) o.sampling.top_k = top_k, o.sampling.top_p = top_p;
        o.sampling.seed = seed + p;
        o.max_new_tokens = max_tokens;
        o.stop_ids = bundle.stop_ids();
        o.mode = arm.mode;
        o.tree.theta = arm.theta;
        o.tree.node_cap = arm.node_cap;
        o.tree.branch_cap = arm.branch_cap;
        o.tree.draft_len = arm.draft_len > 0 ? arm.draft_len : block - 1;
        o.online_calibration = arm.online_calibration;
        if (arm.load_batch > 0) {
          o.fixed_pricing = RequestOptions::FixedPricing{cost, arm.load_batch, 0};
        }
        GenerationResult r = gen.generate(set.prompt_ids[p], o);
        ArmTotals& t = totals[a];
        t.rounds += r.stats.rounds;
        t.accepted += r.stats.accepted_draft_tokens;
        t.predicted += r.stats.predicted_draft_tokens;
        t.generated += r.stats.generated_tokens;
        t.nodes += r.stats.tree_nodes;
        t.decode_ms += r.stats.total_ms - r.stats.prefill_ms;
        t.expand_ms += r.stats.expand_ms;
        t.round_ms += r.stats.draft_ms + r.stats.verify_ms;
      }
      std::fprintf(stderr, "\rT=%.1f prompt %zu/%zu", temperature, p + 1, set.prompt_ids.size());
    }
    std::fprintf(stderr, "\n");
    // The chain baseline: the chain length with the lowest wall clock per token.
    size_t best_chain = 0;
    for (size_t a = 0; a < arms.size(); ++a)
      if (arms[a].mode == DecodeMode::Chain &&
          (best_chain == 0 || totals[a].ms_per_token() < totals[best_chain].ms_per_token()))
        best_chain = a;
    const ArmTotals& chain = totals[best_chain];
    std::printf("\n%s, T = %.1f (top-k %d, top-p %.2f), %zu prompts x %d tokens; baseline = %s (best chain)\n",
                prompts.c_str(), temperature, temperature > 0 ? top_k : 0, temperature > 0 ? top_p : 1.0f,
                set.prompt_ids.size(), max_tokens, arms[best_chain].name.c_str());
    const ArmTotals& plain = totals[0];  // arms[0] is the target alone
    std::printf("%-18s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "arm", "acc/round", "pred/round",
                "tok/round", "tree", "ms/token", "acc x", "speed x", "vs none", "build %");
    for (size_t a = 0; a < arms.size(); ++a) {
      const ArmTotals& t = totals[a];
      const double acc_ratio = chain.accepted_per_round() > 0 ? t.accepted_per_round() / chain.accepted_per_round() : 0;
      const double speed = t.ms_per_token() > 0 ? chain.ms_per_token() / t.ms_per_token() : 0;
      const double build_share = t.round_ms > 0 ? 100.0 * t.expand_ms / t.round_ms : 0;
      const double predicted_per_round = t.rounds ? t.predicted / t.rounds : 0;
      const double vs_plain = t.ms_per_token() > 0 ? plain.ms_per_token() / t.ms_per_token() : 0;
      std::printf("%-18s %10.3f %10.3f %10.3f %10.1f %10.3f %10.3f %10.3f %10.3f %10.2f\n", arms[a].name.c_str(),
                  t.accepted_per_round(), predicted_per_round, t.tokens_per_round(),
                  t.rounds ? double(t.nodes) / t.rounds : 0,
                  t.ms_per_token(), acc_ratio, speed, vs_plain, build_share);
      out.push_back({{"prompts", prompts},
                     {"temperature", temperature},
                     {"arm", arms[a].name},
                     {"accepted_per_round", t.accepted_per_round()},
                     {"predicted_per_round", predicted_per_round},
                     {"tokens_per_round", t.tokens_per_round()},
                     {"mean_tree_size", t.rounds ? double(t.nodes) / t.rounds : 0},
                     {"ms_per_token", t.ms_per_token()},
                     {"accepted_ratio_to_chain", acc_ratio},
                     {"speed_ratio_to_chain", speed},
                     {"speed_ratio_to_target_alone", vs_plain},
                     {"online_calibration", arms[a].online_calibration},
                     {"tree_build_share", build_share / 100.0},
                     {"baseline", arms[best_chain].name}});
    }
  }
  std::ofstream(json_out) << out.dump(2) << "\n";
  std::printf("wrote %s\n", json_out.c_str());
  return 0;
}

}  // namespace ts::bench
