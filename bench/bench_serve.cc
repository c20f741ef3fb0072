// treespark bench serve: Poisson arrivals at several rates against a live server on loopback, one server per arm
// (none / chain / fixed tree / TreeSpark-adaptive) over the same loaded pair. Every request streams (SSE), so
// TTFT is measured where a client sees it. Per arm and rate: goodput, mean and p99 latency and TTFT, tokens per
// round and mean tree size (from each response's timings), and the decode batch the engine ran at. Writes a
// table, JSON, an SVG of goodput and tree size against load, and the rounds' (tree size, accepted) traces that
// `bench serve simulate` replays.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "bench_serve.h"
#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/cost_curve.h"
#include "engine/model_bundle.h"
#include "request_lengths.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/model_setup.h"

namespace ts::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

server::ServerOptions live_server_options(const EngineConfig& config) {
  server::ServerOptions so;
  so.port = 0;
  so.max_batch = config.max_batch;
  so.max_queue = config.max_queue;
  return so;
}

namespace {
// The engine's config as serve sets it from the bundle (the ids its tokenizer can print).
EngineConfig with_bundle(EngineConfig config, const ModelBundle& bundle) {
  config.emit_vocab = bundle.emit_vocab();
  return config;
}
}  // namespace

LiveServer::LiveServer(ModelBundle& bundle, const EngineConfig& config, const RequestOptions& defaults)
    : backend(*bundle.target, bundle.drafter.get(), with_bundle(config, bundle)), http(live_server_options(config)) {
  port = http.bind();
  http.start();
  server::ServedModel served = server::describe_model(bundle, "bench", backend.max_context());
  served.request_defaults = defaults;
  http.set_ready(backend, std::move(served));
}

LiveServer::~LiveServer() {
  http.begin_drain();
  http.wait_idle(60);
  http.stop();
}

std::vector<PromptBody> load_prompts(const std::string& path) {
  std::vector<PromptBody> out;
  if (path.empty()) {
    for (const char* p : {"def fibonacci(n):\n", "The history of the city begins", "import numpy as np\n\n\ndef ",
                          "class Stack:\n    def __init__(self):\n", "Once upon a time, in a small village,"})
      out.push_back({false, {{"prompt", p}}});
    return out;
  }
  std::ifstream in(path);
  TS_CHECK(in, "cannot read prompts ", path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    TS_CHECK(!j.is_discarded() && (j.contains("prompt") || j.contains("messages")), path,
             ": each line must be a JSON object with \"prompt\" or \"messages\"");
    if (j.contains("messages")) {
      out.push_back({true, {{"messages", j["messages"]}}});
    } else {
      out.push_back({false, {{"prompt", j["prompt"]}}});
    }
  }
  TS_CHECK(!out.empty(), path, " holds no prompts");
  return out;
}

Sample one_request(int port, const PromptBody& p, int max_tokens, float temperature, uint64_t seed) {
  Sample s;
  json body = p.body;
  body["max_tokens"] = max_tokens;
  body["temperature"] = temperature;
  body["seed"] = seed;
  body["stream"] = true;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = p.chat ? "/v1/chat/completions" : "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  std::string buffer;
  bool first = true;
  const auto t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    if (first && buffer.find("\"text\":\"") == std::string::npos && buffer.find("\"content\":\"") == std::string::npos)
      return true;
    if (first) {
      // The first chunk with non-empty text (chat's first chunk only carries the role).
      size_t pos = 0;
      while ((pos = buffer.find("data: {", pos)) != std::string::npos) {
        const size_t end = buffer.find("\n\n", pos);
        if (end == std::string::npos) break;
        json e = json::parse(buffer.substr(pos + 6, end - pos - 6), nullptr, false);
        pos = end;
        if (e.is_discarded() || e["choices"].empty()) continue;
        const json& c = e["choices"][0];
        const std::string t = c.contains("text") ? c["text"].get<std::string>()
                              : c["delta"].contains("content") ? c["delta"]["content"].get<std::string>() : "";
        if (!t.empty() || !c["finish_reason"].is_null()) {
          s.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
          first = false;
          break;
        }
      }
    }
    return true;
  };
  httplib::Result r = client.send(req);
  s.latency_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r || r->status != 200) return s;
  // The last data chunk before [DONE] carries usage and timings.
  const size_t done = buffer.rfind("data: [DONE]");
  if (done == std::string::npos) return s;
  const size_t last = buffer.rfind("data: {", done);
  if (last == std::string::npos) return s;
  json fin = json::parse(buffer.substr(last + 6, done - last - 8), nullptr, false);
  if (fin.is_discarded() || !fin.contains("usage") || fin.contains("error")) return s;
  s.ok = true;
  s.tokens = fin["usage"]["completion_tokens"];
  s.rounds = fin["timings"]["rounds"];
  s.draft_n = fin["timings"]["draft_n"];
  s.accepted = fin["timings"]["draft_n_accepted"];
  if (first) s.ttft_s = s.latency_s;
  return s;
}

namespace {

// Poisson arrivals: request i starts at the sum of i exponential gaps; one client thread per request.
std::vector<Sample> run_load(int port, const std::vector<PromptBody>& prompts, double rate, int n, int max_tokens,
                             bool vary_max_tokens, float temperature, uint64_t seed, double* wall_s) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<Sample> samples(static_cast<size_t>(n));
  std::vector<std::thread> clients;
  const auto t0 = Clock::now();
  double at = 0;
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
    clients.emplace_back([&, i] {
      const int limit = request_max_tokens(max_tokens, vary_max_tokens, size_t(i));
      samples[size_t(i)] = one_request(port, prompts[size_t(i) % prompts.size()], limit, temperature, seed + i);
    });
    at += gap(rng);
  }
  for (auto& t : clients) t.join();
  *wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return samples;
}

// Collects what the engine did in each step while one load level runs.
struct StepLog {
  std::mutex mu;
  std::vector<RoundTrace> rounds;
  double batch_sum = 0;
  long decode_steps = 0;
  void on_step(const StepReport& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (s.batch > 0) batch_sum += s.batch, ++decode_steps;
    for (const RoundDecision& d : s.decisions)
      if (d.speculate) rounds.push_back({d.tree_size, d.accepted});
  }
  double mean_batch() {
    std::lock_guard<std::mutex> lock(mu);
    return decode_steps ? batch_sum / double(decode_steps) : 0.0;
  }
  void reset_batch() {
    std::lock_guard<std::mutex> lock(mu);
    batch_sum = 0;
    decode_steps = 0;
  }
};

ServeRow summarize(const std::string& arm, double rate, const std::vector<Sample>& samples, double wall_s) {
  ServeRow row;
  row.arm = arm;
  row.rate = rate;
  row.requests = int(samples.size());
  std::vector<double> lat, ttft;
  long tokens = 0, rounds = 0, draft = 0, accepted = 0;
  for (const Sample& s : samples) {
    if (!s.ok) {
      ++row.failed;
      continue;
    }
    lat.push_back(s.latency_s);
    ttft.push_back(s.ttft_s);
    tokens += s.tokens;
    rounds += s.rounds;
    draft += s.draft_n;
    accepted += s.accepted;
  }
  row.goodput_tps = wall_s > 0 ? double(tokens) / wall_s : 0;
  for (double x : lat) row.mean_latency_s += x / double(lat.size());
  for (double x : ttft) row.mean_ttft_s += x / double(ttft.size());
  row.p99_latency_s = percentile(lat, 0.99);
  row.p99_ttft_s = percentile(ttft, 0.99);
  row.tokens_per_round = rounds ? double(accepted + rounds) / double(rounds) : 1.0;
  row.mean_tree_size = rounds ? double(draft) / double(rounds) : 0.0;
  return row;
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    v.push_back(std::stod(item));
    TS_CHECK(v.back() > 0, "rates must be > 0");
  }
  TS_CHECK(!v.empty(), "empty list '", s, "'");
  return v;
}

}  // namespace

int bench_serve(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "simulate") == 0) return bench_serve_simulate(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "starts") == 0) return bench_serve_starts(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "flood") == 0) return bench_serve_flood(argc - 1, argv + 1);
  CLI::App app{"Poisson load against a live server on loopback, arms none / chain / tree / adaptive. "
               "`bench serve simulate --help`: the same from a cost curve and acceptance traces; `bench serve starts "
               "--help`: fresh servers one after another, plain against TreeSpark; `bench serve flood --help`: latency under a "
               "connection flood."};
  std::string model_dir, drafter_dir, prompts_path, rates_s = "1,2,4,8", arms_s = "none,chain,tree,adaptive";
  std::string json_out = "bench_serve.json", svg_out = "bench_serve.svg", traces_out = "bench_serve_traces.json";
  std::string cost_path, cost_out;
  int requests = 16, max_tokens = 48, max_batch = 8, threads = 0, node_cap = 16, chain_len = -1;
  double theta = 0.05;
  float temperature = 0;
  uint64_t seed = 1;
  app.add_option("--model", model_dir, "target model folder")->required();
  app.add_option("--drafter", drafter_dir, "drafter folder")->required();
  app.add_option("--prompts", prompts_path, "JSONL of {\"prompt\"} or {\"messages\"} (default: 5 built-in prompts)");
  app.add_option("--rates", rates_s, "arrival rates, requests/s, comma-separated");
  app.add_option("--arms", arms_s, "comma-separated subset of none,chain,tree,adaptive");
  app.add_option("--requests", requests, "requests per arm and rate")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "tokens per request")->check(CLI::PositiveNumber);
  bool vary_max_tokens = false;
  app.add_flag("--vary-max-tokens", vary_max_tokens,
               "give request i a limit from max-tokens / 2 to 1.5 x max-tokens (mean about max-tokens) instead of "
               "max-tokens for all, so requests do not all end together");
  app.add_option("--max-batch", max_batch, "the server's max batch")->check(CLI::PositiveNumber);
  app.add_option("--temperature", temperature, "sampling temperature of every request");
  app.add_option("--seed", seed, "arrival and sampling seed");
  app.add_option("--node-cap", node_cap, "tree arms: max draft nodes per round");
  app.add_option("--theta", theta, "tree arms: theta (the adaptive arm's floor)");
  app.add_option("--chain-len", chain_len, "chain arm: draft length (default block_size - 1)");
  app.add_option("--cost-curve", cost_path, "adaptive arm: cost model JSON (default: measured here)");
  app.add_option("--write-cost-curve", cost_out, "write the measured cost curve here (for simulate)");
  app.add_option("--threads", threads, "model threads (0 = $OMP_NUM_THREADS, else every CPU the process may use)");
  std::string kv_dtype = "auto";
  cli::add_kv_dtype_option(app, &kv_dtype);
  std::string quantize = "native";
  cli::add_quantize_option(app, &quantize);
  app.add_option("--json", json_out, "results");
  app.add_option("--svg", svg_out, "plot of goodput and tree size against load");
  app.add_option("--traces", traces_out, "per-arm (tree size, accepted) of every round, for simulate");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::vector<double> rates = parse_list(rates_s);
  std::vector<std::string> arms;
  {
    std::stringstream in(arms_s);
    std::string a;
    while (std::getline(in, a, ','))
      if (!a.empty()) {
        TS_CHECK(a == "none" || a == "chain" || a == "tree" || a == "adaptive", "unknown arm '", a, "'");
        arms.push_back(a);
      }
  }
  const std::vector<PromptBody> prompts = load_prompts(prompts_path);
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, quantize);
  bundle.set_kv_dtype(kv_dtype);
  configure_for_model(bundle.target->weight_bytes(), threads);
  const int block = bundle.drafter->block_size();

  std::optional<CostModel> cost;
  if (std::find(arms.begin(), arms.end(), "adaptive") != arms.end()) {
    if (!cost_path.empty()) {
      cost = read_cost_model(cost_path);
    } else {
      std::fprintf(stderr, "measuring L(b, k) and the drafter's F(b) for b in 1..%d ...\n", max_batch);
      ServingCostOptions co;
      co.batches = server::batch_ladder(max_batch);
      co.context = std::min(co.context, bundle.target->config().max_position_embeddings - 80);
      cost = measure_serving_cost(*bundle.target, bundle.drafter.get(), co);
    }
    if (!cost_out.empty()) write_cost_model(cost_out, *cost);
  }

  std::vector<ServeRow> rows;
  json traces = {{"block_size", block}, {"arms", json::object()}};
  for (const std::string& arm : arms) {
    RequestOptions d;
    d.mode = arm == "none" ? DecodeMode::None : arm == "chain" ? DecodeMode::Chain : DecodeMode::Tree;
    d.tree.theta = theta;
    d.tree.node_cap = node_cap;
    d.tree.branch_cap = 4;
    d.tree.draft_len = chain_len > 0 ? chain_len : block - 1;
    if (d.mode == DecodeMode::Chain) d.tree.node_cap = d.tree.draft_len;
    d.adaptive = arm == "adaptive";
    EngineConfig ec;
    ec.max_batch = max_batch;
    ec.max_queue = std::max(64, requests);
    ec.max_context = std::min(1024, bundle.target->config().max_position_embeddings);
    ec.calibration = bundle.calibration;
    if (arm == "adaptive") ec.cost_model = cost;
    StepLog log;
    ec.on_step = [&log](const StepReport& s) { log.on_step(s); };
    LiveServer live(bundle, ec, d);
    const int port = live.port;
    one_request(port, prompts[0], 4, temperature, seed);  // warm-up
    for (double rate : rates) {
      log.reset_batch();
      double wall_s = 0;
      std::vector<Sample> samples =
          run_load(port, prompts, rate, requests, max_tokens, vary_max_tokens, temperature, seed, &wall_s);
      ServeRow row = summarize(arm, rate, samples, wall_s);
      row.mean_batch = log.mean_batch();
      std::fprintf(stderr, "%-9s rate %6.2f/s: %.1f tok/s, p99 latency %.3f s, tree %.2f, batch %.2f\n", arm.c_str(),
                   rate, row.goodput_tps, row.p99_latency_s, row.mean_tree_size, row.mean_batch);
      rows.push_back(row);
    }
    json t = json::array();
    {
      std::lock_guard<std::mutex> lock(log.mu);
      for (const RoundTrace& r : log.rounds) t.push_back({r.tree_size, r.accepted});
    }
    traces["arms"][arm] = t;
  }
  std::printf("bench serve: %d requests per rate of %s, max batch %d, temperature %.2f, %d threads\n", requests,
              request_limits_text(max_tokens, vary_max_tokens).c_str(), max_batch, temperature, num_threads());
  print_serve_table(rows);
  std::ofstream(json_out) << json{{"model", model_dir}, {"drafter", drafter_dir}, {"requests", requests},
                                  {"max_tokens", max_tokens}, {"vary_max_tokens", vary_max_tokens},
                                  {"max_batch", max_batch}, {"rows", serve_rows_json(rows)}}
                                 .dump(1)
                          << "\n";
  std::ofstream(traces_out) << traces.dump() << "\n";
  write_serve_svg(rows, svg_out, "treespark bench serve (live, loopback)");
  std::printf("wrote %s, %s, %s\n", json_out.c_str(), svg_out.c_str(), traces_out.c_str());
  return 0;
}

}  // namespace ts::bench
