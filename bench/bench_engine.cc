// treespark bench engine: batched throughput of the step engine at several concurrency levels (closed loop: c
// requests in flight until the prompt set is done), arms none / chain / TreeSpark (fixed theta) / TreeSpark with
// the load-adaptive policy, with and without the per-request online calibration refit, run side by side at each
// level. Prints tokens/s, ratios to target-only at the same level and to the same arm at concurrency 1, tokens per
// round, tree size, how often the policy switched speculation off, and the scheduler's share of a step; writes the
// per-batch decisions (theta, tree size) to JSON.
// "model tok/s" prices the very steps the engine ran with the cost model (step_cost_ms) instead of the clock: with --cost-model
// of a bigger (memory-bound) target it projects what the policy's decisions would give there, using the shipped
// pair's real acceptance.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/timer.h"
#include "decode_flags.h"
#include "engine/cost_curve.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "prompt_file.h"
#include "request_lengths.h"

namespace ts::bench {

namespace {

struct Arm {
  std::string name;
  DecodeMode mode;
  double theta;
  int node_cap, draft_len;
  bool adaptive;
  bool online_calibration = true;  // false: the offline calibration as fitted (RequestOptions::online_calibration)
};

struct ArmResult {
  long tokens = 0, rounds = 0, accepted = 0, nodes = 0, decisions = 0, spec_off = 0;
  double wall_ms = 0, step_ms = 0, schedule_ms = 0;
  double modelled_ms = 0;  // the same steps priced by the cost model: sum of L(b, rows per sequence) + F(b)
  long steps = 0;
  // Decode steps by why requests speculated in them (adaptive arms): the policy chose to, an exploration probe made
  // one speculate, or a plain probe kept all plain; and their step ms summed.
  long chosen_steps = 0, probe_steps = 0, plain_probe_steps = 0;
  double chosen_ms = 0, probe_ms = 0;
  std::map<int, std::array<double, 4>> by_batch;  // batch -> {decisions, sum theta, sum tree size, speculating}
  // Full-batch decode steps (no prefill) where every request speculated, and where none did: where a step's time
  // goes. {steps, step ms, forward ms, draft ms, expand ms, verify ms} summed.
  std::array<double, 6> all_spec{}, all_plain{};
  double tok_s() const { return wall_ms > 0 ? 1000.0 * tokens / wall_ms : 0; }
  double modelled_tok_s() const { return modelled_ms > 0 ? 1000.0 * tokens / modelled_ms : 0; }
};

// The arms named (a chain arm answers to "chain" whatever its length), none first: the ratios are to it.
std::vector<Arm> select_arms(const std::vector<Arm>& all, const std::vector<std::string>& names) {
  if (names.empty()) return all;
  const auto key = [](const Arm& a) { return a.mode == DecodeMode::Chain ? std::string("chain") : a.name; };
  for (const std::string& n : names) {
    const bool known = std::any_of(all.begin(), all.end(), [&](const Arm& a) { return key(a) == n; });
    if (!known) throw Error("--arms: unknown arm '" + n + "' (none, chain, treespark, adaptive, adapt-fixcal)");
  }
  std::vector<Arm> chosen = {all.front()};
  for (size_t i = 1; i < all.size(); ++i)
    if (std::find(names.begin(), names.end(), key(all[i])) != names.end()) chosen.push_back(all[i]);
  return chosen;
}

ArmResult run_arm(ModelBundle& bundle, const std::vector<std::vector<int32_t>>& prompts, const Arm& arm, int concurrency,
                  float temperature, int max_tokens, bool vary_max_tokens, const CostModel& cost, uint64_t seed,
                  double prior, int plain_probe_interval) {
  ArmResult res;
  EngineConfig config;
  config.max_batch = concurrency;
  config.max_queue = concurrency;
  config.max_context = bundle.target->config().max_position_embeddings;
  config.prefill_chunk = 256;
  config.calibration = bundle.calibration;
  if (arm.adaptive) config.cost_model = cost;
  if (prior > 0) config.prior_tokens_per_round[0] = config.prior_tokens_per_round[1] = prior;
  if (plain_probe_interval >= 0) config.plain_probe_interval = plain_probe_interval;
  config.on_step = [&](const StepReport& r) {
    int drafting = 0;
    for (const RoundDecision& d : r.decisions) drafting += d.speculate;
    if (r.batch > 0)
      res.modelled_ms += step_cost_ms(cost, r.batch, std::max(r.batch, r.forward_rows - r.prefill_tokens),
                                            drafting);
    if (r.prefill_tokens > 0) res.modelled_ms += cost.cost_ms(1, r.prefill_tokens);
    if (r.batch > 0 && r.prefill_tokens == 0) {
      res.plain_probe_steps += r.plain_probe;
      if (drafting > 0 && r.probe) {
        ++res.probe_steps;
        res.probe_ms += r.step_ms;
      } else if (drafting > 0) {
        ++res.chosen_steps;
        res.chosen_ms += r.step_ms;
      }
    }
    if (r.batch == concurrency && r.prefill_tokens == 0 && (drafting == 0 || drafting == r.batch)) {
      std::array<double, 6>& t = drafting ? res.all_spec : res.all_plain;
      const double parts[6] = {1, r.step_ms, r.forward_ms, r.draft_ms, r.expand_ms, r.verify_ms};
      for (int i = 0; i < 6; ++i) t[i] += parts[i];
    }
    for (const RoundDecision& d : r.decisions) {
      auto& b = res.by_batch[r.batch];
      b[0] += 1;
      b[1] += d.theta;
      b[2] += d.tree_size;
      b[3] += d.speculate;
      ++res.decisions;
      res.spec_off += arm.mode != DecodeMode::None && !d.speculate;
    }
  };
  Engine engine(*bundle.target, bundle.drafter.get(), config);
  size_t next = 0;
  int in_flight = 0;
  auto on_event = [&](const RequestEvent& e) {
    if (e.finish == FinishReason::None) return;
    --in_flight;
    res.tokens += e.stats->generated_tokens;
    res.rounds += e.stats->rounds;
    res.accepted += e.stats->accepted_draft_tokens;
    res.nodes += e.stats->tree_nodes;
  };
  const double t0 = now_ms();
  while (next < prompts.size() || in_flight > 0) {
    while (in_flight < concurrency && next < prompts.size()) {
      Request r;
      r.prompt = prompts[next];
      RequestOptions& o = r.options;
      o.sampling.temperature = temperature;
      o.sampling.seed = seed + next;
      o.max_new_tokens = request_max_tokens(max_tokens, vary_max_tokens, next);
      o.stop_ids = bundle.stop_ids();
      o.mode = arm.mode;
      o.tree.theta = arm.theta;
      o.tree.node_cap = arm.node_cap;
      o.tree.branch_cap = 4;
      o.tree.draft_len = arm.draft_len;
      o.adaptive = arm.adaptive;
      o.online_calibration = arm.online_calibration;
      engine.add(std::move(r), on_event);
      ++in_flight;
      ++next;
    }
    engine.step();
  }
  res.wall_ms = now_ms() - t0;
  const EngineMetrics m = engine.metrics();
  res.steps = m.steps;
  res.step_ms = m.step_ms_total;
  res.schedule_ms = m.schedule_ms_total;
  return res;
}

}  // namespace

int bench_engine(int argc, char** argv) {
  CLI::App app{"Batched throughput of the step engine: arms side by side at several concurrency levels."};
  std::string model_dir, drafter_dir, prompts_path, json_out = "bench_engine.json", cost_path;
  std::vector<int> levels = {1, 4, 8};
  int max_tokens = 64, limit = 16, threads = 0, chain_len = 4, repeats = 3;
  float temperature = 0;
  double prior = 0;
  uint64_t seed = 1;
  app.add_option("--model", model_dir)->required();
  app.add_option("--drafter", drafter_dir)->required();
  app.add_option("--prompts", prompts_path, "JSONL prompt set")->required();
  app.add_option("--concurrency", levels, "requests in flight")->delimiter(',');
  app.add_option("--max-tokens", max_tokens)->check(CLI::PositiveNumber);
  bool vary_max_tokens = false;
  app.add_flag("--vary-max-tokens", vary_max_tokens,
               "give request i a limit from max-tokens / 2 to 1.5 x max-tokens (mean about max-tokens) instead of "
               "max-tokens for all, so requests do not all end together");
  app.add_option("--limit", limit, "prompts per run (each level runs all of them)");
  app.add_option("--temperature", temperature);
  app.add_option("--chain-len", chain_len);
  app.add_option("--repeats", repeats, "runs per arm and level, interleaved; the median tok/s is kept");
  app.add_option("--cost-model", cost_path, "cost model JSON (default: measured at start-up)");
  app.add_option("--prior", prior, "tokens per round the policy assumes before measuring (default: the engine's)");
  int plain_probe_interval = -1;
  app.add_option("--plain-probe-interval", plain_probe_interval,
                 "speculating steps in a row before a plain probe measures an unmeasured plain price (0 = never; "
                 "default: the engine's)");
  app.add_option("--seed", seed);
  app.add_option("--threads", threads);
  std::string kv_dtype = "auto";
  cli::add_kv_dtype_option(app, &kv_dtype);
  std::string quantize = "native", drafter_quantize = "auto";
  cli::add_quantize_option(app, &quantize);
  cli::add_drafter_quantize_option(app, &drafter_quantize);
  std::vector<std::string> arm_names;
  app.add_option("--arms", arm_names,
                 "arms to run besides none (the baseline, always run): chain, treespark (fixed theta), adaptive, "
                 "adapt-fixcal (default: all)")
      ->delimiter(',');
  app.add_option("--json", json_out);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::vector<Arm> all_arms = {
      {"none", DecodeMode::None, 0, 1, 1, false},
      {"chain-" + std::to_string(chain_len), DecodeMode::Chain, 0, chain_len, chain_len, false},
      {"treespark", DecodeMode::Tree, 0.05, 64, 4, false},
      {"adaptive", DecodeMode::Tree, 0.0, 64, 4, true},
      {"adapt-fixcal", DecodeMode::Tree, 0.0, 64, 4, true, false}};
  const std::vector<Arm> arms = select_arms(all_arms, arm_names);
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, quantize, drafter_quantize);
  bundle.set_kv_dtype(kv_dtype);
  configure_for_model(bundle.target->weight_bytes(), threads);
  cli::PromptSet set = cli::load_prompt_set(prompts_path, bundle);
  if (limit > 0 && size_t(limit) < set.prompt_ids.size()) set.prompt_ids.resize(limit);

  double t0 = now_ms();
  CostModel cost;
  if (!cost_path.empty()) {
    cost = read_cost_model(cost_path);
  } else {
    ServingCostOptions so;
    so.batches = {1, 2, 4, 8};
    for (int c : levels)
      if (c > 8) so.batches.push_back(c);
    std::sort(so.batches.begin(), so.batches.end());
    so.batches.erase(std::unique(so.batches.begin(), so.batches.end()), so.batches.end());
    cost = measure_serving_cost(*bundle.target, bundle.drafter.get(), so);
  }
  std::printf("cost model (%s, %.0f ms): L(b, k) ms, F(b) = batched drafter forward\n",
              cost_path.empty() ? "measured" : cost_path.c_str(), now_ms() - t0);
  for (size_t i = 0; i < cost.batches.size(); ++i) {
    std::printf("  b=%-3d", cost.batches[i]);
    for (size_t j = 0; j < cost.tokens.size(); ++j)
      std::printf(" k=%d %.2f", cost.tokens[j], cost.ms[i * cost.tokens.size() + j]);
    std::printf("  F=%.2f\n", cost.fixed_cost_ms(cost.batches[i]));
  }

  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, double> at_one;
  std::printf("\n%s, T = %.1f, %zu prompts x %s\n", prompts_path.c_str(), temperature, set.prompt_ids.size(),
              request_limits_text(max_tokens, vary_max_tokens).c_str());
  std::printf("%-5s %-10s %9s %9s %9s %9s %8s %9s %8s %8s %11s %9s\n", "conc", "arm", "tok/s", "x none", "x conc1",
              "tok/rnd", "tree", "spec off", "step ms", "sched %", "model tok/s", "x none");
  for (int c : levels) {
    // Interleaved repeats (the machine is shared and noisy): arm by arm, `repeats` times; keep the median run.
    std::vector<std::vector<ArmResult>> runs(arms.size());
    for (int rep = 0; rep < std::max(1, repeats); ++rep)
      for (size_t a = 0; a < arms.size(); ++a)
        runs[a].push_back(run_arm(bundle, set.prompt_ids, arms[a], c, temperature, max_tokens, vary_max_tokens, cost,
                                  seed, prior, plain_probe_interval));
    std::vector<ArmResult> results;
    for (auto& r : runs) {
      std::sort(r.begin(), r.end(), [](const ArmResult& x, const ArmResult& y) { return x.tok_s() < y.tok_s(); });
      results.push_back(r[r.size() / 2]);
    }
    for (size_t a = 0; a < arms.size(); ++a) {
      const ArmResult& r = results[a];
      if (c == levels.front()) at_one[arms[a].name] = r.tok_s();
      const double vs_none = results[0].tok_s() > 0 ? r.tok_s() / results[0].tok_s() : 0;
      const double vs_one = at_one[arms[a].name] > 0 ? r.tok_s() / at_one[arms[a].name] : 0;
      const double tpr = r.rounds ? double(r.accepted + r.rounds) / r.rounds : 0;
      const double tree = r.rounds ? double(r.nodes) / r.rounds : 0;
      const double off = r.decisions ? double(r.spec_off) / r.decisions : 0;
      const double sched = r.step_ms > 0 ? 100.0 * r.schedule_ms / r.step_ms : 0;
      const double model_vs_none =
          results[0].modelled_tok_s() > 0 ? r.modelled_tok_s() / results[0].modelled_tok_s() : 0;
      std::printf("%-5d %-10s %9.1f %9.3f %9.3f %9.2f %8.1f %9.2f %8.3f %8.3f %11.1f %9.3f\n", c, arms[a].name.c_str(),
                  r.tok_s(), vs_none, vs_one, tpr, tree, off, r.steps ? r.step_ms / r.steps : 0, sched,
                  r.modelled_tok_s(), model_vs_none);
      for (const auto* t : {&r.all_plain, &r.all_spec}) {
        const std::array<double, 6>& v = *t;
        if (v[0] == 0) continue;
        std::printf("      %s steps at batch %d: %.0f, ms per step: all %.3f = forward %.3f + draft %.3f + "
                    "expand %.3f + verify %.3f + other %.3f\n",
                    t == &r.all_plain ? "plain" : "speculating", c, v[0], v[1] / v[0], v[2] / v[0], v[3] / v[0],
                    v[4] / v[0], v[5] / v[0], (v[1] - v[2] - v[3] - v[4] - v[5]) / v[0]);
      }
      if (arms[a].adaptive)
        std::printf("      decode steps with drafting: %ld chosen by the policy (%.3f ms each), %ld exploration probes "
                    "(%.3f ms each); %ld plain probes\n",
                    r.chosen_steps, r.chosen_steps ? r.chosen_ms / r.chosen_steps : 0, r.probe_steps,
                    r.probe_steps ? r.probe_ms / r.probe_steps : 0, r.plain_probe_steps);
      nlohmann::json by_batch = nlohmann::json::array();
      for (const auto& [b, v] : r.by_batch)
        by_batch.push_back({{"batch", b}, {"decisions", v[0]}, {"mean_theta", v[1] / v[0]},
                            {"mean_tree_size", v[2] / v[0]}, {"speculating_share", v[3] / v[0]}});
      out.push_back({{"concurrency", c}, {"arm", arms[a].name}, {"temperature", temperature},
                     {"tokens", r.tokens}, {"vary_max_tokens", vary_max_tokens},
                     {"tokens_per_second", r.tok_s()}, {"ratio_to_none", vs_none}, {"ratio_to_concurrency_1", vs_one},
                     {"tokens_per_round", tpr}, {"mean_tree_size", tree}, {"spec_off_share", off},
                     {"mean_step_ms", r.steps ? r.step_ms / r.steps : 0}, {"scheduler_share", sched / 100},
                     {"modelled_tokens_per_second", r.modelled_tok_s()}, {"modelled_ratio_to_none", model_vs_none},
                     {"by_batch", by_batch}});
    }
  }
  std::ofstream(json_out) << out.dump(2) << "\n";
  std::printf("wrote %s\n", json_out.c_str());
  return 0;
}

}  // namespace ts::bench
