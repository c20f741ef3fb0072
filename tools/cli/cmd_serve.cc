// treespark serve: the OpenAI-compatible server (src/server) over the batched step engine.
// Start-up: listen first (/health answers 503 while loading), load the pair, measure or read the cost curve for
// the load-adaptive policy, then serve. SIGTERM / SIGINT drain: new requests get 503, idle connections close,
// running ones finish (or are cancelled after --drain-timeout), then the process exits 0.
#include <pthread.h>
#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/cost_cache.h"
#include "engine/cost_curve.h"
#include "engine/model_bundle.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/kv_events.h"
#include "server/model_setup.h"

namespace ts::cli {

namespace {

struct SpecFlags {
  std::string mode = "tree", priority = "calibrated";
  double theta = 0.05;
  int node_cap = 32, branch_cap = 4, draft_len = -1;
  bool fixed_theta = false;
  std::string cost_curve;

  RequestOptions defaults(const Drafter* drafter) const {
    RequestOptions o;
    o.mode = !drafter || mode == "none" ? DecodeMode::None
             : mode == "chain"            ? DecodeMode::Chain
                                          : cli::tree_mode(priority);
    spec_decode::TreeShape& t = o.tree;
    t.theta = theta;
    t.node_cap = node_cap;
    t.branch_cap = branch_cap;
    t.draft_len = draft_len > 0 ? draft_len : std::max(1, drafter ? drafter->block_size() - 1 : 1);
    if (o.mode == DecodeMode::Chain) t.node_cap = t.draft_len;
    o.adaptive = !fixed_theta;
    return o;
  }
};

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics."};
  std::string model_dir, drafter_dir, name;
  server::ServerOptions http;
  EngineConfig engine;
  SpecFlags spec;
  int threads = 0, kv_budget_mb = 0;
  app.add_option("--model", model_dir, "target model folder (Hugging Face layout, with tokenizer.json)")->required();
  app.add_option("--drafter", drafter_dir, "DSpark drafter folder (without it: no speculation)");
  app.add_option("--host", http.host, "address to listen on");
  app.add_option("--port", http.port, "port (0: any free one, printed at start-up)");
  app.add_option("--api-key", http.api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  app.add_option("--max-batch", engine.max_batch, "requests decoded together")->check(CLI::PositiveNumber);
  app.add_option("--max-queue", engine.max_queue, "requests waiting beyond the batch (then 429)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-context", engine.max_context, "prompt + generated tokens per request")
      ->check(CLI::PositiveNumber);
  app.add_option("--prefill-chunk", engine.prefill_chunk, "prompt tokens prefilled per step")->check(CLI::PositiveNumber);
  app.add_option("--kv-budget-mb", kv_budget_mb, "KV memory all requests share (0: max-batch x max-context)");
  bool no_prefix_cache = false;
  app.add_flag("--no-prefix-cache", no_prefix_cache,
               "do not reuse the KV rows of prompt prefixes (system prompts, earlier chat turns) across requests");
  app.add_option("--prefix-block-tokens", engine.prefix_block_tokens,
                 "tokens per prefix-cache block, a multiple of 16 (whole blocks are shared in place)")
      ->check(CLI::Range(16, 4096))
      ->check(CLI::Validator(
          [](const std::string& v) { return std::stoi(v) % 16 == 0 ? std::string() : "not a multiple of 16"; },
          "MULTIPLE OF 16"));
  app.add_option("--served-model-name", name, "the model id clients use (default: the target folder's name)");
  app.add_option("--max-body-bytes", http.limits.max_body_bytes, "larger request bodies (chunked too) get 413");
  app.add_option("--max-connections", http.limits.max_connections,
                 "open connections; past it a new one gets 503 and is closed")
      ->check(CLI::PositiveNumber);
  app.add_option("--header-timeout", http.limits.header_timeout_s,
                 "seconds a client has for a whole request header, idle keep-alive time included")
      ->check(CLI::PositiveNumber);
  bool deterministic_trees = false;
  app.add_flag("--deterministic-trees", deterministic_trees,
               "price trees from the cost curve alone, not from measured step times: with the same cost curve "
               "(cached or --cost-curve) a seeded request repeats its sample across restarts (load still changes "
               "tree shapes)");
  double drain_timeout_s = 30;
  app.add_option("--drain-timeout", drain_timeout_s,
                 "on SIGTERM: seconds running requests get to finish before they are cancelled")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads for the model (0 = $OMP_NUM_THREADS, else every CPU the process may use)");
  std::string kv_dtype = "auto";
  add_kv_dtype_option(app, &kv_dtype);
  std::string quantize = "native", drafter_quantize = "auto";
  add_quantize_option(app, &quantize);
  add_drafter_quantize_option(app, &drafter_quantize);
  app.add_flag("--log-requests", http.access_log, "one line per response on stderr");
  std::string log_level = "info";
  app.add_option("--log-level", log_level,
                 "info: start-up decisions; debug: also one line per decode step on stderr (batch, probe, theta and "
                 "tree size per request, predicted vs actual ms)")
      ->check(CLI::IsMember({"info", "debug"}));
  app.add_option("--mode", spec.mode, "none (target only) | chain | tree")->check(CLI::IsMember({"none", "chain", "tree"}));
  app.add_option("--priority", spec.priority, "tree priority: calibrated | logq | marginal")
      ->check(CLI::IsMember({"calibrated", "logq", "marginal"}));
  app.add_option("--theta", spec.theta, "theta floor: a node needs at least this survival");
  app.add_option("--node-cap", spec.node_cap, "max draft nodes per round")->check(CLI::PositiveNumber);
  app.add_option("--branch-cap", spec.branch_cap, "max children per node")->check(CLI::PositiveNumber);
  app.add_option("--draft-len", spec.draft_len, "chain length (default: block_size - 1)");
  app.add_flag("--fixed-theta", spec.fixed_theta, "no load-adaptive policy: every round uses --theta");
  app.add_option("--cost-curve", spec.cost_curve,
                 "cost model JSON (engine/cost_curve.h: write_cost_model; default: measured at start-up)");
  std::string generation_config = "auto";
  app.add_option("--generation-config", generation_config,
                 "sampling defaults for what a request leaves out, as vLLM's flag: auto = the model folder's "
                 "generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty; max_new_tokens bounds "
                 "a request that names no length), vllm = OpenAI's (temperature 1, the rest off), or a folder "
                 "holding a generation_config.json");
  std::string kv_events_endpoint, kv_events_topic;
  CLI::Option* kv_events_flag =
      app.add_option("--kv-events", kv_events_endpoint,
                     "publish KV-cache events (vLLM's schema) on a ZeroMQ PUB socket, e.g. tcp://*:5557");
  app.add_option("--kv-events-topic", kv_events_topic,
                 "topic of the published KV-cache events (default empty; llm-d's subscribers expect kv@POD@MODEL)")
      ->needs(kv_events_flag);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // A --generation-config folder is read before anything loads, so a wrong path stops start-up at once.
  GenerationConfig generation_config_file;
  if (generation_config != "auto" && generation_config != "vllm") {
    generation_config_file = load_generation_config(generation_config);
    TS_CHECK(generation_config_file.present, "--generation-config: no generation_config.json in ", generation_config,
             " (or auto / vllm)");
  }
  if (name.empty()) {
    name = model_dir;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    name = name.substr(name.find_last_of('/') + 1);
  }
  http.max_batch = engine.max_batch;
  http.max_queue = engine.max_queue;
  if (kv_budget_mb > 0) engine.kv_budget_bytes = int64_t(kv_budget_mb) << 20;
  engine.prefix_cache = !no_prefix_cache;
  engine.deterministic_trees = deterministic_trees;
  if (log_level == "debug") engine.on_step = log_policy_step;

  // SIGTERM / SIGINT go to one waiting thread: block them here, before any thread starts, so every thread
  // inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;
  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::lock_guard<std::mutex> lock(mu);
    stop_requested = true;
    cv.notify_all();
  });
  // On any exit path (a load error included) the waiter gets its signal and is joined.
  struct JoinWaiter {
    std::thread& t;
    ~JoinWaiter() {
      if (!t.joinable()) return;
      ::kill(::getpid(), SIGTERM);  // blocked everywhere: only the waiter's sigwait takes it
      t.join();
    }
  } join_waiter{signal_waiter};

  // Every connection is a descriptor: raise the soft limit toward the hard one so --max-connections can be met.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t want = rlim_t(http.limits.max_connections) + 256;
    if (files.rlim_cur < want) {
      files.rlim_cur = files.rlim_max == RLIM_INFINITY ? want : std::min(want, files.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur < rlim_t(http.limits.max_connections) + 64)
      std::fprintf(stderr, "treespark serve: only %llu open files allowed; --max-connections %d will not be reached\n",
                   (unsigned long long)files.rlim_cur, http.limits.max_connections);
  }
  // Bound before the HTTP port and the load, so a bad endpoint stops start-up at once; after the signal mask, so
  // libzmq's threads inherit it; declared before the engine that calls it, so it outlives it.
  std::unique_ptr<server::KvEventPublisher> kv_events;
  if (!kv_events_endpoint.empty()) {
    kv_events = std::make_unique<server::KvEventPublisher>(kv_events_endpoint, kv_events_topic);
    engine.on_kv_events = [publisher = kv_events.get()](const std::vector<KvCacheEvent>& events) {
      publisher->publish(events);
    };
    std::fprintf(stderr, "treespark serve: KV-cache events on %s, topic '%s'\n", kv_events->endpoint().c_str(),
                 kv_events_topic.c_str());
  }
  server::HttpServer server(http);
  const int port = server.bind();
  server.start();
  std::fprintf(stderr, "treespark serve: listening on http://%s:%d (loading %s)\n", http.host.c_str(), port,
               model_dir.c_str());

  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, quantize, drafter_quantize);
  bundle.set_kv_dtype(kv_dtype);
  configure_for_model(bundle.target->weight_bytes(), threads);
  std::fprintf(stderr, "treespark serve: %s\n", bundle.weights_summary().c_str());
  if (bundle.drafter) std::fprintf(stderr, "treespark serve: %s\n", bundle.calibration_summary().c_str());
  RequestOptions defaults = spec.defaults(bundle.drafter.get());
  engine.calibration = bundle.calibration;
  engine.emit_vocab = bundle.emit_vocab();
  if (engine.emit_vocab > 0) {
    const int rows = bundle.target->config().vocab_size;
    std::fprintf(stderr, "treespark serve: the model has %d token ids, its tokenizer %d: ids %d..%d are never "
                 "emitted\n", rows, engine.emit_vocab, engine.emit_vocab, rows - 1);
  }
  if (bundle.drafter && defaults.mode != DecodeMode::None && defaults.adaptive) {
    if (!spec.cost_curve.empty()) {
      engine.cost_model = read_cost_model(spec.cost_curve);
      std::fprintf(stderr, "treespark serve: cost curve from %s\n", spec.cost_curve.c_str());
    } else {
      std::fprintf(stderr, "treespark serve: cost curve L(b, k) for the load-adaptive policy ...\n");
      CostCacheOptions co;
      co.model_dir = model_dir;
      co.drafter_dir = drafter_dir;
      co.batches = server::batch_ladder(engine.max_batch);
      const CostCacheResult measured = cached_cost_model(*bundle.target, bundle.drafter.get(), co);
      std::fprintf(stderr, "treespark serve: %s\n", measured.log.c_str());
      engine.cost_model = measured.cost;
    }
    const CostModel& c = *engine.cost_model;
    std::fprintf(stderr,
                 "treespark serve: policy prices at batch 1: L(1,1) %.3f ms, L(1,%d) %.3f ms, drafter F(1) %.3f ms; "
                 "probes every %d-%d plain steps when speculation is off\n",
                 c.cost_ms(1, 1), c.tokens.back(), c.cost_ms(1, c.tokens.back()), c.fixed_cost_ms(1),
                 sched::SchedulerConfig{}.probe_interval, sched::SchedulerConfig{}.max_probe_interval);
  }
  std::fprintf(stderr, "treespark serve: warmed up in %.0f ms\n", bundle.warm_up());
  auto backend = std::make_unique<server::EngineBackend>(*bundle.target, bundle.drafter.get(), engine);
  server::ServedModel served = server::describe_model(bundle, name, backend->max_context());
  served.request_defaults = defaults;
  if (generation_config != "vllm") {
    const GenerationConfig& g = generation_config == "auto" ? bundle.generation_config : generation_config_file;
    served.sampling = server::sampling_defaults(g);
    if (g.present) {
      const server::SamplingDefaults& d = served.sampling;
      std::fprintf(stderr,
                   "treespark serve: sampling defaults from generation_config.json (a request's own values win): "
                   "temperature %g, top_p %g, top_k %d, min_p %g, repetition_penalty %g%s\n",
                   d.temperature, d.top_p, d.top_k, d.min_p, d.repetition_penalty,
                   d.max_tokens > 0 ? cat(", max_tokens at most ", d.max_tokens, " when not given").c_str() : "");
      for (const std::string& key : g.unsupported)
        std::fprintf(stderr, "treespark serve: generation_config.json sets '%s', which treespark does not apply\n",
                     key.c_str());
    }
  }
  server.set_ready(*backend, std::move(served));
  std::fprintf(stderr, "treespark serve: ready: model '%s', mode %s%s, max batch %d, max queue %d, context %d\n",
               name.c_str(), defaults.mode == DecodeMode::None ? "none" : spec.mode.c_str(),
               engine.cost_model ? " (load-adaptive)" : "", engine.max_batch, engine.max_queue, backend->max_context());
  const EngineMetrics at_start = backend->metrics();
  if (engine.prefix_cache)
    std::fprintf(stderr, "treespark serve: prefix cache: blocks of %d tokens within a KV budget of %lld MB (%lld blocks)\n",
                 at_start.prefix_cache_block_tokens, (long long)(at_start.kv_budget_bytes >> 20),
                 (long long)at_start.prefix_cache_capacity_blocks);
  else
    std::fprintf(stderr, "treespark serve: prefix cache off\n");

  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stop_requested; });
  }
  std::fprintf(stderr, "treespark serve: draining (%d requests in flight)\n", server.in_flight());
  server.begin_drain();  // idle and slow connections close now
  if (!server.wait_idle(drain_timeout_s)) {  // running requests finish; their streams end with [DONE]
    std::fprintf(stderr, "treespark serve: drain timeout (%.0f s): cancelling %d requests\n", drain_timeout_s,
                 server.in_flight());
    server.cancel_running();
    server.wait_idle(1);
  }
  backend->drain();
  server.stop();
  backend.reset();
  std::fprintf(stderr, "treespark serve: drained, exiting\n");
  return 0;
}

}  // namespace ts::cli
