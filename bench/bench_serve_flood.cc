// treespark bench serve flood: does a server under a connection flood still answer? A live server (TreeSpark,
// load-adaptive trees from the per-machine cost cache) over the loaded pair; phases alternate, unloaded and
// flooded, so drift hits both alike. A flooded phase holds `connections` client connections: half send a header
// line every `drip_ms` and never finish it (reconnecting when the server closes them at its header deadline),
// half connect and send nothing. Per phase: /health latency (median, p99, max), the mean latency of `requests`
// greedy streamed requests one after another, and the process's resident memory beside the unloaded phase; then
// the flooded/unloaded latency ratio. Both ends run in this process, so memory counts the clients' few bytes too.
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <httplib.h>
#include <thread>

#include "bench_serve.h"
#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/cost_cache.h"
#include "server/model_setup.h"

namespace ts::bench {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double resident_mb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(::sysconf(_SC_PAGESIZE)) / 1e6;
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ::close(fd), -1;
  return fd;
}

// The attacker: `n` connections, even ones dripping an unfinished header, odd ones silent.
class Flood {
 public:
  Flood(int port, int n, int drip_ms) : port_(port), drip_ms_(drip_ms), fds_(size_t(n), -1) {
    for (size_t i = 0; i < fds_.size(); ++i) open(i);
    thread_ = std::thread([this] { run(); });
  }
  ~Flood() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  long reconnects() const { return reconnects_.load(); }

 private:
  void open(size_t i) {
    fds_[i] = connect_to(port_);
    static const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    if (fds_[i] >= 0 && i % 2 == 0) ::send(fds_[i], head.data(), head.size(), MSG_NOSIGNAL);
  }
  void run() {
    while (!stop_) {
      for (size_t i = 0; i < fds_.size() && !stop_; ++i) {
        bool gone = fds_[i] < 0;
        if (!gone) {
          pollfd p{fds_[i], POLLIN, 0};
          gone = ::poll(&p, 1, 0) > 0;  // the server closed it (its header deadline)
          static const std::string line = "X-Drip: 1\r\n";
          if (!gone && i % 2 == 0) gone = ::send(fds_[i], line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
        }
        if (gone) {
          if (fds_[i] >= 0) ::close(fds_[i]);
          open(i);
          reconnects_.fetch_add(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(drip_ms_));
    }
  }
  const int port_, drip_ms_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<long> reconnects_{0};
  std::thread thread_;
};

struct Phase {
  std::vector<double> health_ms;
  double request_s = 0;  // mean latency
  int failed = 0;
  double rss_mb = 0;
  int open_connections = 0;
};

Phase measure(int port, const std::vector<PromptBody>& prompts, int requests, int max_tokens, int health_probes,
              const server::HttpServer& http) {
  Phase ph;
  for (int i = 0; i < health_probes; ++i) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(10, 0);
    const auto t0 = Clock::now();
    auto r = c.Get("/health");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ph.health_ms.push_back(r && r->status == 200 ? ms : 1e9);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  double total = 0;
  for (int i = 0; i < requests; ++i) {
    const Sample s = one_request(port, prompts[size_t(i) % prompts.size()], max_tokens, 0, 1);
    if (!s.ok) ++ph.failed;
    total += s.latency_s;
  }
  ph.request_s = requests ? total / requests : 0;
  ph.rss_mb = resident_mb();
  ph.open_connections = http.open_connections();
  return ph;
}

}  // namespace

int bench_serve_flood(int argc, char** argv) {
  CLI::App app{"A live server under a flood of slow and idle connections: /health and request latency beside the "
               "unloaded server, and memory."};
  std::string model_dir, drafter_dir, json_out = "bench_serve_flood.json";
  int connections = 1000, drip_ms = 1000, requests = 8, max_tokens = 64, rounds = 2, health_probes = 50, threads = 0;
  app.add_option("--model", model_dir, "target model folder")->required();
  app.add_option("--drafter", drafter_dir, "drafter folder")->required();
  app.add_option("--connections", connections, "flooding connections (half dripping a header, half silent)")
      ->check(CLI::PositiveNumber);
  app.add_option("--drip-ms", drip_ms, "interval between a dripping connection's header lines")->check(CLI::PositiveNumber);
  app.add_option("--requests", requests, "greedy streamed requests per phase, one after another")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "tokens per request")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "unloaded + flooded phase pairs")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "model threads (0 = $OMP_NUM_THREADS, else every CPU the process may use)");
  app.add_option("--json", json_out, "results");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  TS_CHECK(rlim_t(connections) * 2 + 256 <= files.rlim_cur, "bench serve flood: ", connections,
           " connections need ", connections * 2 + 256, " descriptors; the limit is ", (long long)files.rlim_cur);
  const std::vector<PromptBody> prompts = load_prompts("");
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, "native");
  TS_CHECK(bundle.drafter, "bench serve flood needs --drafter");
  configure_for_model(bundle.target->weight_bytes(), threads);
  CostCacheOptions co;
  co.model_dir = model_dir;
  co.drafter_dir = drafter_dir;
  co.batches = server::batch_ladder(8);
  const CostCacheResult measured = cached_cost_model(*bundle.target, bundle.drafter.get(), co);
  EngineConfig ec;
  ec.max_context = std::min(1024, bundle.target->config().max_position_embeddings);
  ec.calibration = bundle.calibration;
  ec.cost_model = measured.cost;
  RequestOptions tree;  // the serve defaults
  tree.tree.theta = 0.05;
  tree.tree.node_cap = 32;
  tree.tree.branch_cap = 4;
  tree.tree.draft_len = bundle.drafter->block_size() - 1;
  LiveServer live(bundle, ec, tree);

  std::printf("bench serve flood: %s; %d connections (half dripping a header line every %d ms, half silent), "
              "%d requests x %d tokens per phase, %d threads, ISA %s\n",
              cpu_model_name().c_str(), connections, drip_ms, requests, max_tokens, num_threads(), isa_name(active_isa()));
  std::printf("%-6s %-9s %11s %11s %11s %12s %7s %9s %11s\n", "round", "phase", "health p50", "health p99",
              "health max", "request mean", "failed", "RSS MB", "connections");
  json rows = json::array();
  std::vector<double> ratios, rss_growth;
  for (int round = 0; round < rounds; ++round) {
    Phase quiet = measure(live.port, prompts, requests, max_tokens, health_probes, live.http);
    Phase flooded;
    long reconnects = 0;
    {
      Flood flood(live.port, connections, drip_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      flooded = measure(live.port, prompts, requests, max_tokens, health_probes, live.http);
      reconnects = flood.reconnects();
    }
    for (auto* ph : {&quiet, &flooded}) {
      const bool f = ph == &flooded;
      std::printf("%-6d %-9s %9.2fms %9.2fms %9.2fms %11.3fs %7d %9.1f %11d\n", round + 1, f ? "flooded" : "unloaded",
                  percentile(ph->health_ms, 0.5), percentile(ph->health_ms, 0.99), percentile(ph->health_ms, 1.0),
                  ph->request_s, ph->failed, ph->rss_mb, ph->open_connections);
      rows.push_back({{"round", round + 1}, {"phase", f ? "flooded" : "unloaded"},
                      {"health_p50_ms", percentile(ph->health_ms, 0.5)}, {"health_p99_ms", percentile(ph->health_ms, 0.99)},
                      {"health_max_ms", percentile(ph->health_ms, 1.0)}, {"request_mean_s", ph->request_s},
                      {"failed", ph->failed}, {"rss_mb", ph->rss_mb}, {"open_connections", ph->open_connections},
                      {"reconnects", f ? reconnects : 0}});
    }
    ratios.push_back(quiet.request_s > 0 ? flooded.request_s / quiet.request_s : 0);
    rss_growth.push_back(flooded.rss_mb - quiet.rss_mb);
    std::printf("       flooded / unloaded request latency %.3fx, RSS %+.1f MB, %ld reconnects after header deadlines\n",
                ratios.back(), rss_growth.back(), reconnects);
  }
  std::ofstream(json_out) << json{{"cpu", cpu_model_name()}, {"connections", connections}, {"drip_ms", drip_ms},
                                  {"requests", requests}, {"max_tokens", max_tokens}, {"rows", rows}}
                                 .dump(1)
                          << "\n";
  return 0;
}

}  // namespace ts::bench
