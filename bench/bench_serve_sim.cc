// treespark bench serve simulate: the live benchmark's load levels replayed in a discrete-event model of the
// engine's continuous batching, from a measured cost curve L(b, k) + F(b) and recorded acceptance traces (the
// (tree size, accepted) pair of every round of a live `bench serve` run). It projects what this machine cannot
// run: bigger models (a cost curve measured on other hardware) and bigger batches.
//
// Model of one engine step with b decoding requests (the newly admitted ones prefill in the same step):
//   step_ms = sum over prefilling requests of L(1, prompt_tokens) + L(b, mean verified rows) + F(b) if any drafts;
//   each decoding request gains 1 + accepted tokens, where (tree size, accepted) is a round drawn from the arm's
//   trace -- for `adaptive`, the tree size is the one that maximises expected tokens per ms at this b (expected
//   acceptance per tree size pooled over every recorded round), or no speculation when that is faster.
// Requests arrive by a Poisson process; at most max_batch run, the rest wait (FIFO), as in the engine.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "bench_serve.h"
#include "core/error.h"
#include "engine/cost_curve.h"

namespace ts::bench {

namespace {

using nlohmann::json;

struct Traces {
  std::map<std::string, std::vector<RoundTrace>> by_arm;
  std::map<int, std::vector<int>> accepted_by_size;  // pooled over arms: tree size -> accepted of each round
};

Traces read_traces(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in, "cannot read traces ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  TS_CHECK(!j.is_discarded() && j.contains("arms") && j["arms"].is_object(), path,
           ": expected {\"arms\": {arm: [[tree_size, accepted], ...]}} (bench serve --traces)");
  Traces t;
  for (auto& [arm, rounds] : j["arms"].items()) {
    for (const json& r : rounds) {
      TS_CHECK(r.is_array() && r.size() == 2, path, ": a round is [tree_size, accepted]");
      RoundTrace rt{r[0].get<int>(), r[1].get<int>()};
      TS_CHECK(rt.tree_size >= 0 && rt.accepted >= 0 && rt.accepted <= rt.tree_size, path, ": bad round [",
               rt.tree_size, ", ", rt.accepted, "]");
      t.by_arm[arm].push_back(rt);
      if (rt.tree_size > 0) t.accepted_by_size[rt.tree_size].push_back(rt.accepted);
    }
  }
  return t;
}

struct SimRequest {
  double arrival = 0, first_token = -1;
  int remaining = 0;
  bool prefilled = false;
};

struct SimConfig {
  std::string arm;
  double rate = 1;
  int requests = 200, max_tokens = 128, prompt_tokens = 128, max_batch = 8;
  uint64_t seed = 1;
};

ServeRow simulate(const SimConfig& c, const CostModel& cost, const Traces& traces) {
  std::mt19937_64 rng(c.seed);
  std::exponential_distribution<double> gap(c.rate);
  std::vector<double> arrivals;
  double at = 0;
  for (int i = 0; i < c.requests; ++i) {
    arrivals.push_back(at);
    at += gap(rng);
  }
  const std::vector<RoundTrace>* arm_trace = nullptr;
  if (c.arm != "none" && c.arm != "adaptive") {
    auto it = traces.by_arm.find(c.arm);
    TS_CHECK(it != traces.by_arm.end() && !it->second.empty(), "the traces have no rounds for arm '", c.arm, "'");
    arm_trace = &it->second;
  }
  // Expected accepted tokens per tree size (adaptive's choice), from the pooled rounds.
  std::map<int, double> mean_accepted;
  for (const auto& [size, acc] : traces.accepted_by_size) {
    double s = 0;
    for (int a : acc) s += a;
    mean_accepted[size] = s / double(acc.size());
  }
  if (c.arm == "adaptive") TS_CHECK(!mean_accepted.empty(), "the traces hold no speculative rounds");

  std::deque<SimRequest> waiting;
  std::vector<SimRequest> running;
  std::vector<double> latency, ttft;
  size_t next = 0;
  double t = 0, batch_sum = 0;
  long tokens = 0, rounds = 0, tree_nodes = 0, accepted_total = 0, decode_steps = 0;
  int done = 0;
  while (done < c.requests) {
    while (next < arrivals.size() && arrivals[next] <= t) waiting.push_back({arrivals[next++], -1, c.max_tokens, false});
    if (running.empty() && waiting.empty()) {
      t = arrivals[next];
      continue;
    }
    while (int(running.size()) < c.max_batch && !waiting.empty()) {
      running.push_back(waiting.front());
      waiting.pop_front();
    }
    int b = 0;
    for (const SimRequest& r : running) b += r.prefilled;
    // This step's tree size per decoding request.
    int adaptive_size = 0;
    if (c.arm == "adaptive" && b > 0) {
      double best = double(b) / cost.cost_ms(b, 1);
      for (const auto& [size, acc] : mean_accepted) {
        const double rate = b * (1.0 + acc) / (cost.cost_ms(b, size + 1) + cost.fixed_cost_ms(b));
        if (rate > best) best = rate, adaptive_size = size;
      }
    }
    std::vector<RoundTrace> step_rounds;
    double rows = 0;
    for (const SimRequest& r : running) {
      if (!r.prefilled) continue;
      RoundTrace rt;
      if (arm_trace) {
        rt = (*arm_trace)[std::uniform_int_distribution<size_t>(0, arm_trace->size() - 1)(rng)];
      } else if (adaptive_size > 0) {
        const std::vector<int>& acc = traces.accepted_by_size.at(adaptive_size);
        rt = {adaptive_size, acc[std::uniform_int_distribution<size_t>(0, acc.size() - 1)(rng)]};
      }
      step_rounds.push_back(rt);
      rows += rt.tree_size + 1;
    }
    double ms = 0;
    for (const SimRequest& r : running)
      if (!r.prefilled) ms += cost.cost_ms(1, c.prompt_tokens);
    bool drafted = false;
    for (const RoundTrace& rt : step_rounds) drafted |= rt.tree_size > 0;
    if (b > 0) {
      ms += cost.cost_ms(b, int(std::ceil(rows / b)));
      if (drafted) ms += cost.fixed_cost_ms(b);
      batch_sum += b;
      ++decode_steps;
    }
    t += ms / 1e3;
    size_t k = 0;
    for (SimRequest& r : running) {
      if (!r.prefilled) {  // the prefill's logits give the first token
        r.prefilled = true;
        r.first_token = t;
        r.remaining -= 1;
        tokens += 1;
        continue;
      }
      const RoundTrace& rt = step_rounds[k++];
      const int gained = std::min(r.remaining, 1 + rt.accepted);
      r.remaining -= gained;
      tokens += gained;
      if (rt.tree_size > 0) ++rounds, tree_nodes += rt.tree_size, accepted_total += rt.accepted;
    }
    for (auto it = running.begin(); it != running.end();) {
      if (it->remaining > 0) {
        ++it;
        continue;
      }
      latency.push_back(t - it->arrival);
      ttft.push_back(it->first_token - it->arrival);
      ++done;
      it = running.erase(it);
    }
  }
  ServeRow row;
  row.arm = c.arm;
  row.rate = c.rate;
  row.requests = c.requests;
  row.goodput_tps = t > 0 ? double(tokens) / t : 0;
  for (double x : latency) row.mean_latency_s += x / double(latency.size());
  for (double x : ttft) row.mean_ttft_s += x / double(ttft.size());
  row.p99_latency_s = percentile(latency, 0.99);
  row.p99_ttft_s = percentile(ttft, 0.99);
  row.tokens_per_round = rounds ? double(accepted_total + rounds) / double(rounds) : 1.0;
  row.mean_tree_size = rounds ? double(tree_nodes) / double(rounds) : 0.0;
  row.mean_batch = decode_steps ? batch_sum / double(decode_steps) : 0.0;
  return row;
}

}  // namespace

int bench_serve_simulate(int argc, char** argv) {
  CLI::App app{"bench serve from a cost curve and acceptance traces (projects bigger models and batches)."};
  std::string cost_path, traces_path, rates_s = "1,2,4,8,16,32", arms_s = "none,chain,tree,adaptive";
  std::string json_out = "bench_serve_sim.json", svg_out = "bench_serve_sim.svg";
  SimConfig base;
  app.add_option("--cost-curve", cost_path, "cost model JSON (bench serve --write-cost-curve, engine/cost_curve.h)")->required();
  app.add_option("--traces", traces_path, "bench serve --traces output")->required();
  app.add_option("--rates", rates_s, "arrival rates, requests/s");
  app.add_option("--arms", arms_s, "arms: none, adaptive, and any arm in the traces");
  app.add_option("--requests", base.requests, "requests per arm and rate")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", base.max_tokens, "tokens per request")->check(CLI::PositiveNumber);
  app.add_option("--prompt-tokens", base.prompt_tokens, "prompt tokens per request")->check(CLI::PositiveNumber);
  app.add_option("--max-batch", base.max_batch, "requests decoded together")->check(CLI::PositiveNumber);
  app.add_option("--seed", base.seed, "arrival and trace-sampling seed");
  app.add_option("--json", json_out, "results");
  app.add_option("--svg", svg_out, "plot");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const CostModel cost = read_cost_model(cost_path);
  const Traces traces = read_traces(traces_path);
  std::vector<double> rates;
  {
    std::stringstream in(rates_s);
    std::string x;
    while (std::getline(in, x, ','))
      if (!x.empty()) rates.push_back(std::stod(x));
  }
  std::vector<std::string> arms;
  {
    std::stringstream in(arms_s);
    std::string x;
    while (std::getline(in, x, ','))
      if (!x.empty()) arms.push_back(x);
  }
  std::vector<ServeRow> rows;
  for (const std::string& arm : arms)
    for (double rate : rates) {
      SimConfig c = base;
      c.arm = arm;
      c.rate = rate;
      rows.push_back(simulate(c, cost, traces));
    }
  std::printf("bench serve simulate: %d requests per rate, %d prompt + %d new tokens, max batch %d\n", base.requests,
              base.prompt_tokens, base.max_tokens, base.max_batch);
  print_serve_table(rows);
  std::ofstream(json_out) << json{{"cost_curve", cost_path}, {"traces", traces_path}, {"rows", serve_rows_json(rows)}}.dump(1)
                          << "\n";
  write_serve_svg(rows, svg_out, "treespark bench serve simulate (cost curve + acceptance traces)");
  std::printf("wrote %s, %s\n", json_out.c_str(), svg_out.c_str());
  return 0;
}

}  // namespace ts::bench
