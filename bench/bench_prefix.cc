// treespark bench prefix: what the engine's prefix cache saves, cache on and off side by side in one run.
//   shared prefix: a request sharing a long prefix (default 1000 tokens) with an earlier one: its time to first token
//                  against the same request on an engine without the cache (median of --repeats);
//   chat:          an --turns-turn conversation growing to about --chat-tokens tokens (each turn sends the whole
//                  conversation: the earlier prompts and answers plus a new user message): the prompt tokens the
//                  target computed over all turns / the final conversation length, and the last turn's time to first
//                  token / the first turn's;
//   system prompt: --requests requests sharing one --system-tokens-token system prompt, each with its own question,
//                  --concurrency at a time: generated tokens/s with the cache against without it;
// (random ids when the model has no tokenizer), and, per block size of --block-sizes, the system-prompt workload's hits and the cache's bookkeeping per step (its
// share of the step time). Token ids come from the eval sets' text (eval/*.jsonl through the model's tokenizer),
// so prompts are realistic text; generation ignores end-of-sequence (fixed lengths).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "benches.h"
#include "core/cpu.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "decode_flags.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "prompt_file.h"

namespace ts::bench {

namespace {

struct Setup {
  ModelBundle* bundle;
  RequestOptions options;  // mode, tree shape; max_new_tokens set per workload
  int max_batch = 8;
  int block_tokens = 16;
};

Engine make_engine(const Setup& s, bool cache, int block_tokens, std::function<void(const StepReport&)> on_step = {}) {
  EngineConfig c;
  c.on_step = std::move(on_step);
  c.max_batch = s.max_batch;
  c.max_queue = 1024;
  c.max_context = s.bundle->target->config().max_position_embeddings;
  c.prefix_cache = cache;
  c.prefix_block_tokens = block_tokens;
  return Engine(*s.bundle->target, s.bundle->drafter.get(), c);
}

struct Done {
  std::vector<int32_t> ids;
  RequestStats stats;
};

// Runs the requests to completion (all queued at once; the engine admits max_batch at a time).
std::vector<Done> run_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, RequestOptions o) {
  std::vector<Done> done(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.add({prompts[i], o}, [&done, i](const RequestEvent& e) {
      done[i].ids.insert(done[i].ids.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::None) done[i].stats = *e.stats;
    });
  while (!engine.idle()) engine.step();
  return done;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// n token ids of text, starting `offset` tokens into the corpus (wrapping).
std::vector<int32_t> text_ids(const std::vector<int32_t>& corpus, size_t offset, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(corpus[(offset + size_t(i)) % corpus.size()]);
  return out;
}

nlohmann::json shared_prefix(const Setup& s, const std::vector<int32_t>& corpus, int prefix, int repeats) {
  const int question = 16;
  RequestOptions o = s.options;
  o.max_new_tokens = 4;
  std::vector<double> cold, cached;
  int cached_tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    const std::vector<int32_t> base = text_ids(corpus, size_t(r) * 7919, prefix);
    std::vector<int32_t> first = base, second = base;
    const auto q1 = text_ids(corpus, 50000 + size_t(r) * 31, question), q2 = text_ids(corpus, 60000 + size_t(r) * 37, question);
    first.insert(first.end(), q1.begin(), q1.end());
    second.insert(second.end(), q2.begin(), q2.end());
    Engine on = make_engine(s, true, s.block_tokens), off = make_engine(s, false, s.block_tokens);
    run_all(on, {first}, o);
    const Done hit = run_all(on, {second}, o)[0];
    const Done miss = run_all(off, {second}, o)[0];
    if (hit.ids != miss.ids) std::fprintf(stderr, "bench prefix: cached and cold outputs differ (a bug)\n");
    cached.push_back(hit.stats.ttft_ms);
    cold.push_back(miss.stats.ttft_ms);
    cached_tokens = hit.stats.cached_prompt_tokens;
  }
  const double c = median(cold), h = median(cached);
  std::printf("shared prefix: %d-token prefix + %d-token question; TTFT cold %.1f ms, cached %.1f ms (%d tokens "
              "cached): %.3f of cold\n", prefix, question, c, h, cached_tokens, c > 0 ? h / c : 0);
  return {{"prefix_tokens", prefix}, {"ttft_cold_ms", c}, {"ttft_cached_ms", h}, {"cached_tokens", cached_tokens},
          {"ratio", c > 0 ? h / c : 0}};
}

nlohmann::json chat(const Setup& s, const std::vector<int32_t>& corpus, int turns, int total, int answer) {
  const int user = std::max(8, total / turns - answer);
  RequestOptions o = s.options;
  o.max_new_tokens = answer;
  nlohmann::json out;
  std::printf("chat: %d turns of a %d-token user message and a %d-token answer\n", turns, user, answer);
  std::printf("  %-6s %14s %12s %16s %16s %10s\n", "cache", "conversation", "computed", "computed/final",
              "TTFT 1st, last", "last/1st");
  for (bool cache : {false, true}) {
    // Where the first token's time goes: the steps up to it (prefill), forward vs the rest.
    double prefill_step_ms = 0, prefill_forward_ms = 0;
    bool first_token_seen = false;
    Engine engine = make_engine(s, cache, s.block_tokens, [&](const StepReport& r) {
      if (first_token_seen) return;
      prefill_step_ms += r.step_ms;
      prefill_forward_ms += r.forward_ms;
      first_token_seen = r.prefill_requests > 0;  // the one prefill chunk of a turn ends with its first token
    });
    std::vector<int32_t> conversation;
    std::vector<double> ttft;
    std::vector<std::pair<double, double>> split;
    double last_decode_ms = 0;  // the last turn's ms per token after its first (its history read from the cache)
    for (int t = 0; t < turns; ++t) {
      const auto message = text_ids(corpus, 90000 + size_t(t) * 1009, user);
      conversation.insert(conversation.end(), message.begin(), message.end());
      prefill_step_ms = prefill_forward_ms = 0;
      first_token_seen = false;
      const Done d = run_all(engine, {conversation}, o)[0];
      split.push_back({prefill_step_ms, prefill_forward_ms});
      ttft.push_back(d.stats.ttft_ms);
      if (d.stats.generated_tokens > 1)
        last_decode_ms = (d.stats.total_ms - d.stats.ttft_ms) / (d.stats.generated_tokens - 1);
      conversation.insert(conversation.end(), d.ids.begin(), d.ids.end());
    }
    const EngineMetrics m = engine.metrics();
    const double ratio = double(m.prompt_tokens_computed) / double(conversation.size());
    std::printf("  %-6s %14zu %12lld %16.2f %7.1f, %6.1f %10.2f\n", cache ? "on" : "off", conversation.size(),
                (long long)m.prompt_tokens_computed, ratio, ttft.front(), ttft.back(), ttft.back() / ttft.front());
    std::printf("         first token's step, turn 1: %.1f ms (forward %.1f); last turn: %.1f ms (forward %.1f), then "
                "%.2f ms per token\n",
                split.front().first, split.front().second, split.back().first, split.back().second, last_decode_ms);
    out[cache ? "on" : "off"] = {{"conversation_tokens", conversation.size()},
                                 {"prompt_tokens_computed", m.prompt_tokens_computed},
                                 {"computed_over_final", ratio}, {"ttft_first_ms", ttft.front()},
                                 {"ttft_last_ms", ttft.back()}, {"last_over_first", ttft.back() / ttft.front()},
                                 {"last_turn_decode_ms_per_token", last_decode_ms}};
  }
  return out;
}

struct SystemRun {
  double tok_s = 0, wall_ms = 0, cache_ms_per_step = 0, copy_ms_per_step = 0, step_ms = 0, decode_step_ms = 0;
  int64_t hits = 0, queries = 0, steps = 0;
};

SystemRun system_prompt_run(const Setup& s, const std::vector<int32_t>& corpus, int requests, int system, int answer,
                            bool cache, int block_tokens) {
  std::vector<std::vector<int32_t>> prompts;
  const auto sys = text_ids(corpus, 123457, system);
  for (int i = 0; i < requests; ++i) {
    std::vector<int32_t> p = sys;
    const auto q = text_ids(corpus, 200000 + size_t(i) * 211, 24);
    p.insert(p.end(), q.begin(), q.end());
    prompts.push_back(p);
  }
  RequestOptions o = s.options;
  o.max_new_tokens = answer;
  Engine engine = make_engine(s, cache, block_tokens);
  const double t0 = now_ms();
  const std::vector<Done> done = run_all(engine, prompts, o);
  SystemRun r;
  r.wall_ms = now_ms() - t0;
  long tokens = 0;
  for (const Done& d : done) tokens += long(d.ids.size());
  const EngineMetrics m = engine.metrics();
  r.tok_s = 1000.0 * tokens / r.wall_ms;
  r.hits = m.prefix_cache_hits;
  r.queries = m.prefix_cache_queries;
  r.steps = m.steps;
  r.step_ms = m.steps ? m.step_ms_total / m.steps : 0;
  r.cache_ms_per_step = m.steps ? m.prefix_cache_ms_total / m.steps : 0;
  r.copy_ms_per_step = m.steps ? m.prefix_cache_copy_ms_total / m.steps : 0;
  return r;
}

}  // namespace

int bench_prefix(int argc, char** argv) {
  CLI::App app{"What the prefix cache saves: TTFT with a shared prefix, prefill work in a chat, throughput with a "
               "shared system prompt; cache on and off side by side."};
  std::string model_dir, drafter_dir, mode = "tree", corpus_dir, json_out = "bench_prefix.json";
  int prefix = 1000, turns = 8, chat_tokens = 2000, answer = 32, requests = 64, system = 500, concurrency = 8;
  int repeats = 3, threads = 0;
  std::vector<int> block_sizes = {16, 32, 64};
  std::vector<std::string> workloads = {"shared", "chat", "system"};
  app.add_option("--model", model_dir)->required();
  app.add_option("--drafter", drafter_dir, "DSpark drafter (without it: plain decoding)");
  app.add_option("--mode", mode, "tree | none")->check(CLI::IsMember({"tree", "none"}));
  app.add_option("--prefix-tokens", prefix, "shared prefix length");
  app.add_option("--turns", turns);
  app.add_option("--chat-tokens", chat_tokens, "the conversation's final length (clamped to the context)");
  app.add_option("--answer-tokens", answer, "tokens generated per chat turn and per system-prompt request");
  app.add_option("--requests", requests);
  app.add_option("--system-tokens", system);
  app.add_option("--concurrency", concurrency);
  app.add_option("--block-sizes", block_sizes, "block sizes of the sweep (the first workloads use 16)")->delimiter(',');
  app.add_option("--repeats", repeats);
  app.add_option("--workloads", workloads, "shared,chat,system (default: all)")->delimiter(',');
  app.add_option("--eval-dir", corpus_dir, "folder of *.jsonl prompt sets for the text (default: eval/ beside the model's repository)");
  app.add_option("--threads", threads);
  app.add_option("--json", json_out);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ModelBundle bundle = ModelBundle::load(model_dir, mode == "tree" ? drafter_dir : "");
  configure_for_model(bundle.target->weight_bytes(), threads);
  if (corpus_dir.empty()) corpus_dir = model_dir + "/../../eval";
  std::vector<int32_t> corpus;
  if (bundle.tokenizer) {
    for (const char* name : {"prose", "chat", "code"}) {
      const cli::PromptSet set = cli::load_prompt_set(corpus_dir + "/" + name + ".jsonl", bundle);
      for (const auto& ids : set.prompt_ids) corpus.insert(corpus.end(), ids.begin(), ids.end());
    }
  } else {  // a random-weight model (make-model) has no tokenizer: its text means nothing anyway
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 300000; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      corpus.push_back(int32_t(x % uint64_t(bundle.target->config().vocab_size)));
    }
  }
  TS_CHECK(corpus.size() > 1000, "bench prefix: the eval sets hold only ", corpus.size(), " tokens");

  Setup s{&bundle, {}, concurrency, 16};
  s.options.mode = bundle.drafter ? DecodeMode::Tree : DecodeMode::None;
  s.options.tree.theta = 0.05;
  s.options.tree.node_cap = 32;
  s.options.tree.branch_cap = 4;
  s.options.adaptive = false;
  const int max_ctx = bundle.target->config().max_position_embeddings;
  prefix = std::min(prefix, max_ctx - 16 - 4 - 1);
  chat_tokens = std::min(chat_tokens, max_ctx - answer - 1);
  std::printf("treespark bench prefix: %s, %d threads; target %s (%d positions), %s\n", cpu_model_name().c_str(),
              num_threads(), model_dir.c_str(), max_ctx, bundle.drafter ? "TreeSpark (tree, theta 0.05)" : "plain");
  nlohmann::json out;
  out["cpu"] = cpu_model_name();
  auto wants = [&](const char* w) { return std::find(workloads.begin(), workloads.end(), w) != workloads.end(); };
  if (wants("shared")) out["shared_prefix"] = shared_prefix(s, corpus, prefix, repeats);
  if (wants("chat")) out["chat"] = chat(s, corpus, turns, chat_tokens, answer);
  if (!wants("system")) {
    std::ofstream(json_out) << out.dump(2) << "\n";
    return 0;
  }

  std::printf("system prompt: %d requests, %d-token system prompt + 24-token question, %d tokens each, %d at a time\n",
              requests, system, answer, concurrency);
  std::printf("  (cache ms/step: the prefix cache's work per engine step, averaged over all steps; of which copy: rows "
              "copied into the pool, and tails into requests; the rest is bookkeeping)\n");
  std::printf("  %-7s %6s %9s %8s %10s %10s %12s %10s %9s %11s\n", "cache", "block", "tok/s", "x off", "hit share",
              "step ms", "cache ms/step", "copy ms", "cache %", "bookkeep %");
  nlohmann::json sweep = nlohmann::json::array();
  const SystemRun off = system_prompt_run(s, corpus, requests, system, answer, false, 16);
  std::printf("  %-7s %6s %9.1f %8.3f %10s %10.3f %12s %10s %9s %11s\n", "off", "-", off.tok_s, 1.0, "-", off.step_ms,
              "-", "-", "-", "-");
  for (int b : block_sizes) {
    const SystemRun on = system_prompt_run(s, corpus, requests, system, answer, true, b);
    const double share = on.queries ? double(on.hits) / double(on.queries) : 0;
    const double pct = on.step_ms > 0 ? 100 * on.cache_ms_per_step / on.step_ms : 0;
    const double book = on.step_ms > 0 ? 100 * (on.cache_ms_per_step - on.copy_ms_per_step) / on.step_ms : 0;
    std::printf("  %-7s %6d %9.1f %8.3f %10.3f %10.3f %12.4f %10.4f %9.3f %11.3f\n", "on", b, on.tok_s,
                on.tok_s / off.tok_s, share, on.step_ms, on.cache_ms_per_step, on.copy_ms_per_step, pct, book);
    sweep.push_back({{"block_tokens", b}, {"tok_s", on.tok_s}, {"ratio_to_off", on.tok_s / off.tok_s},
                     {"hit_share", share}, {"step_ms", on.step_ms}, {"cache_ms_per_step", on.cache_ms_per_step},
                     {"copy_ms_per_step", on.copy_ms_per_step}});
  }
  out["system_prompt"] = {{"off_tok_s", off.tok_s}, {"off_step_ms", off.step_ms}, {"on", sweep}};
  std::ofstream(json_out) << out.dump(2) << "\n";
  std::printf("wrote %s\n", json_out.c_str());
  return 0;
}

}  // namespace ts::bench
