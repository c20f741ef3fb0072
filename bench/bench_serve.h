// `treespark bench serve` (live, bench_serve.cc) and `treespark bench serve simulate` (bench_serve_sim.cc) share
// the per-arm, per-rate result rows, the table, the JSON and the SVG plot (goodput and mean tree size against
// the arrival rate, one line per arm).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model_bundle.h"
#include "server/engine_backend.h"
#include "server/http_server.h"

namespace ts::bench {

struct ServeRow {
  std::string arm;            // none | chain | tree | adaptive
  double rate = 0;            // offered load, requests per second (Poisson)
  int requests = 0, failed = 0;
  double goodput_tps = 0;     // generated tokens of completed requests / wall seconds of the run
  double mean_latency_s = 0, p99_latency_s = 0;  // end to end
  double mean_ttft_s = 0, p99_ttft_s = 0;
  double tokens_per_round = 0;  // (accepted draft tokens + rounds) / rounds; 1 without speculation
  double mean_tree_size = 0;    // draft nodes per round
  double mean_batch = 0;        // decode batch the engine ran at, averaged over steps
};

// Nearest-rank percentile, q in [0, 1]; 0 for an empty sample.
double percentile(std::vector<double> values, double q);
void print_serve_table(const std::vector<ServeRow>& rows);
nlohmann::json serve_rows_json(const std::vector<ServeRow>& rows);
// Two panels over the rate axis: goodput (tok/s) and mean tree size, a line per arm.
void write_serve_svg(const std::vector<ServeRow>& rows, const std::string& path, const std::string& title);

// Acceptance traces: per arm, the (tree size, accepted draft tokens) of every round a live run made.
struct RoundTrace {
  int tree_size = 0;
  int accepted = 0;
};

int bench_serve_simulate(int argc, char** argv);
// `treespark bench serve starts`: fresh servers one after another, plain against TreeSpark (bench_serve_starts.cc).
int bench_serve_starts(int argc, char** argv);
// `treespark bench serve flood`: /health and request latency under a flood of slow and idle connections
// (bench_serve_flood.cc).
int bench_serve_flood(int argc, char** argv);

// What one streamed request saw (bench_serve.cc).
struct Sample {
  bool ok = false;
  double latency_s = 0, ttft_s = 0;
  int tokens = 0, rounds = 0;
  long draft_n = 0, accepted = 0;
};
// One prompt: a completions body ({"prompt"}) or a chat body ({"messages"}).
struct PromptBody {
  bool chat = false;
  nlohmann::json body;
};
// JSONL of {"prompt"} or {"messages"}; "" gives five built-in prompts.
std::vector<PromptBody> load_prompts(const std::string& path);
// An engine backend and its HTTP server on a free loopback port over a loaded pair, ready for requests; the
// destructor drains and stops it. The bundle must outlive it.
struct LiveServer {
  LiveServer(ModelBundle& bundle, const EngineConfig& config, const RequestOptions& defaults);
  ~LiveServer();
  server::EngineBackend backend;
  server::HttpServer http;
  int port = 0;
};
// One streamed request to the server on loopback at port.
Sample one_request(int port, const PromptBody& p, int max_tokens, float temperature, uint64_t seed);

}  // namespace ts::bench
