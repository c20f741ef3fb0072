// treespark bench round: where one speculative round's time goes, phase by phase, on a model pair.
//
// The round is the engine's (spec_decode::Round, driven here for one request with a timer around each phase):
//   draft   Drafter::draft_block (one drafter forward over [anchor, mask x (block - 1)])
//   tree    Round::draft (tree build: conditional logits, draft softmax, selection / draws)
//   target  the target forward over [anchor + tree] with the ancestor mask
//   walk    Round::finish (the verification walk)
//   extend  KV commit, the accepted rows' taps gathered and the drafter's context extended
// and the same prompts decoded by the target alone (Generator, mode none) for tokens/s side by side. At T = 0 it
// also checks greedy identity (the speculative tokens must equal the target-only ones) and fails if they differ.
// It drives the round without the engine's batching, so the phases are timed alone; the engine's own rounds are
// timed per phase by its step reports (bench engine).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "benches.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/timer.h"
#include "engine/generator.h"
#include "engine/model_bundle.h"
#include "decode_flags.h"
#include "prompt_file.h"
#include "sampling/chooser.h"
#include "sampling/distribution.h"
#include "spec_decode/round.h"

namespace ts::bench {

namespace {

struct PhaseTotals {
  double draft = 0, tree = 0, target = 0, walk = 0, extend = 0, round = 0;  // ms summed over rounds
  double none_ms = 0;                                                     // target-only decode ms
  long rounds = 0, generated = 0, none_generated = 0, accepted = 0, nodes = 0;
  long q_calls_tree = 0, q_calls_walk = 0, parents_distinct = 0;  // conditional_logits calls, distinct parents
  int identity_failures = 0;
  void add(const PhaseTotals& o) {
    draft += o.draft, tree += o.tree, target += o.target, walk += o.walk, extend += o.extend, round += o.round;
    none_ms += o.none_ms;
    rounds += o.rounds, generated += o.generated, none_generated += o.none_generated, accepted += o.accepted;
    nodes += o.nodes, q_calls_tree += o.q_calls_tree, q_calls_walk += o.q_calls_walk;
    parents_distinct += o.parents_distinct, identity_failures += o.identity_failures;
  }
};

// Rows `rows` of hidden: [n_taps, n, H] as drafter context rows: [rows.size(), n_taps * H].
void gather_rows(const std::vector<float>& hidden, int n_taps, int n, int H, const std::vector<int32_t>& rows,
                 std::vector<float>* out) {
  out->resize(rows.size() * size_t(n_taps) * H);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int t = 0; t < n_taps; ++t)
      std::memcpy(&(*out)[(i * n_taps + t) * H], &hidden[(size_t(t) * n + rows[i]) * H], sizeof(float) * H);
}

// One speculative generation with the round phases timed (the engine's round for one request, mode tree).
PhaseTotals run_speculative(ModelBundle& bundle, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                            const spec_decode::Calibration& calibration, std::vector<int32_t>* ids) {
  TargetModel& target = *bundle.target;
  Drafter& drafter = *bundle.drafter;
  const int V = target.config().vocab_size, H = target.config().hidden_size, B = drafter.block_size();
  const std::vector<int32_t> taps = drafter.config().target_layer_ids;
  const int n_taps = int(taps.size());
  const int max_ctx = std::min(opt.max_context, target.config().max_position_embeddings);
  RandomChooser chooser(opt.sampling.seed);
  std::vector<double> probs;
  KVCache cache = target.new_cache(max_ctx + opt.tree.node_cap + 2);
  DrafterState dstate = drafter.new_state(max_ctx);
  // Room for the whole generation now, as the engine reserves at admission: growing mid-round allocates fresh pages
  // and copies every row so far, which the engine's rounds never pay and the target alone (Generator) did not here.
  const int generation_rows = int(prompt.size()) + opt.max_new_tokens + opt.tree.node_cap + 2;
  cache.reserve(generation_rows);
  dstate.context.reserve(generation_rows);
  PhaseTotals t;

  ForwardResult fr;
  ForwardBatch prefill;
  prefill.tokens = prompt;
  for (int i = 0; i < int(prompt.size()); ++i) prefill.positions.push_back(i);
  prefill.logit_rows = {int(prompt.size()) - 1};
  prefill.hidden_layers = taps;
  target.forward(prefill, {&cache}, &fr);
  cache.commit_all();
  std::vector<int32_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
  std::vector<float> ctx;
  gather_rows(fr.hidden, n_taps, int(prompt.size()), H, rows, &ctx);
  drafter.extend_context(dstate, ctx.data(), prefill.positions.data(), int(prompt.size()));
  int32_t anchor = sample_token(fr.logits.data(), V, opt.sampling, chooser, probs);
  ids->assign(1, anchor);

  std::vector<float> base_logits(size_t(B) * V);  // [B, V]
  bool in_walk = false;
  std::set<int32_t> parents;
  spec_decode::TreeParams params;
  static_cast<spec_decode::TreeShape&>(params) = opt.tree;
  params.mode = DecodeMode::Tree;
  params.temperature = opt.sampling.temperature;
  while (int(ids->size()) < opt.max_new_tokens) {
    const int pos = cache.length();
    if (pos + B + 1 > max_ctx) break;
    const double t0 = now_ms();
    drafter.draft_block(dstate, anchor, pos, base_logits.data());
    spec_decode::DraftedBlock block;
    block.vocab = V;
    block.block_size = B;
    block.base_logits = base_logits.data();
    block.add_markov_bias = [&](int32_t parent, float* out) {  // counts q's computations, phase by phase
      ++(in_walk ? t.q_calls_walk : t.q_calls_tree);
      parents.insert(parent);
      drafter.add_markov_bias(parent, out);
    };
    spec_decode::Round round(std::move(block));
    const double t1 = now_ms();
    in_walk = false;
    parents.clear();
    round.draft(anchor, params, calibration, chooser);
    const spec_decode::DraftTree& tree = round.tree();
    const double t2 = now_ms();
    const int n = tree.size();
    ForwardBatch b;
    b.tokens = tree.token;
    b.visible = tree.ancestor_mask();
    for (int i = 0; i < n; ++i) {
      b.positions.push_back(pos + tree.depth[i]);
      b.logit_rows.push_back(i);
    }
    b.hidden_layers = taps;
    target.forward(b, {&cache}, &fr);
    const double t3 = now_ms();
    in_walk = true;
    const spec_decode::RoundOutcome out = round.finish(fr.logits.data(), opt.sampling, chooser);
    const double t4 = now_ms();
    cache.commit(out.kept_nodes);
    std::vector<int32_t> kept_positions;
    for (int32_t depth : out.kept_depths) kept_positions.push_back(pos + depth);
    gather_rows(fr.hidden, n_taps, n, H, out.kept_nodes, &ctx);
    drafter.extend_context(dstate, ctx.data(), kept_positions.data(), int(out.kept_nodes.size()));
    const double t5 = now_ms();
    t.draft += t1 - t0, t.tree += t2 - t1, t.target += t3 - t2, t.walk += t4 - t3, t.extend += t5 - t4;
    t.round += t5 - t0;
    t.rounds += 1;
    t.accepted += long(out.accepted);
    t.nodes += out.draft_nodes;
    t.parents_distinct += long(parents.size());
    for (const spec_decode::RoundOutcome::Emitted& e : out.emitted) ids->push_back(e.token);
    anchor = out.emitted.back().token;
  }
  ids->resize(std::min<size_t>(ids->size(), size_t(opt.max_new_tokens)));
  t.generated = long(ids->size());
  return t;
}

void print_row(const char* label, const PhaseTotals& t) {
  const double r = t.round > 0 ? 100.0 / t.round : 0;
  const double spec_tps = t.round > 0 ? 1000.0 * t.generated / t.round : 0;
  const double none_tps = t.none_ms > 0 ? 1000.0 * t.none_generated / t.none_ms : 0;
  std::printf("%-10s %7.3f %6.2f %6.2f %6.2f %6.2f %6.2f %7.2f %8.1f %8.1f %6.3f %6.1f %6.1f %5.1f\n", label,
              t.rounds ? t.round / t.rounds : 0, t.draft * r, t.tree * r, t.target * r, t.walk * r, t.extend * r,
              (t.draft + t.tree + t.extend) * r, spec_tps, none_tps, none_tps > 0 ? spec_tps / none_tps : 0,
              t.rounds ? double(t.accepted + t.rounds) / t.rounds : 0, t.rounds ? double(t.nodes) / t.rounds : 0,
              t.rounds ? double(t.q_calls_tree + t.q_calls_walk) / t.rounds : 0);
}

}  // namespace

int bench_round(int argc, char** argv) {
  CLI::App app{"One speculative round, phase by phase: drafter forward, tree build, target forward, walk, extend."};
  std::string model_dir, drafter_dir, prompts;
  std::vector<float> temperatures = {0.0f, 1.0f};
  int max_tokens = 128, limit = 4, threads = 1, node_cap = 32, branch_cap = 4, repeats = 1;
  double theta = 0.05;
  uint64_t seed = 1;
  app.add_option("--model", model_dir)->required();
  app.add_option("--drafter", drafter_dir)->required();
  app.add_option("--prompts", prompts, "JSONL prompt set")->required();
  app.add_option("--temperatures", temperatures)->delimiter(',');
  app.add_option("--max-tokens", max_tokens);
  app.add_option("--limit", limit, "use only the first N prompts (0 = all)");
  app.add_option("--repeats", repeats, "decode every prompt this many times (seeds seed, seed + 1, ...)");
  app.add_option("--theta", theta);
  app.add_option("--node-cap", node_cap);
  app.add_option("--branch-cap", branch_cap);
  app.add_option("--seed", seed);
  app.add_option("--threads", threads, "CPU threads (default 1: each piece of a round timed without hand-offs between threads; 0 = the pool default)");
  std::string quantize = "native";
  cli::add_quantize_option(app, &quantize);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, quantize);
  TS_CHECK(bundle.drafter, "bench round needs --drafter");
  configure_for_model(bundle.target->weight_bytes(), threads);
  cli::PromptSet set = cli::load_prompt_set(prompts, bundle);
  if (limit > 0 && size_t(limit) < set.prompt_ids.size()) set.prompt_ids.resize(limit);

  std::printf("%s: %zu prompts x %d tokens x %d repeats, %d thread(s), theta %.3g, node cap %d, branch cap %d\n",
              prompts.c_str(), set.prompt_ids.size(), max_tokens, repeats, threads, theta, node_cap, branch_cap);
  std::printf("%% of a round: draft = drafter forward, tree = expand, target = tree forward, walk = verify,\n"
              "extend = commit + drafter context; drafter = draft + tree + extend. tok/s: speculative, target alone.\n");
  std::printf("%-10s %7s %6s %6s %6s %6s %6s %7s %8s %8s %6s %6s %6s %5s\n", "", "ms/rnd", "draft", "tree", "target",
              "walk", "extend", "drafter", "spec t/s", "none t/s", "x", "tok/r", "nodes", "q/r");
  int failures = 0;
  for (float temperature : temperatures) {
    const spec_decode::Calibration calibration = bundle.calibration.lookup(temperature);
    Generator plain(*bundle.target, nullptr);
    PhaseTotals all;
    for (size_t p = 0; p < set.prompt_ids.size(); ++p) {
      for (int rep = 0; rep < repeats; ++rep) {
        GenerateOptions o;
        o.sampling.temperature = temperature;
        o.sampling.seed = seed + uint64_t(p) * 1000 + uint64_t(rep);
        o.max_new_tokens = max_tokens;
        o.mode = DecodeMode::Tree;
        o.tree.theta = theta;
        o.tree.node_cap = node_cap;
        o.tree.branch_cap = branch_cap;
        std::vector<int32_t> spec_ids;
        PhaseTotals t = run_speculative(bundle, set.prompt_ids[p], o, calibration, &spec_ids);
        o.mode = DecodeMode::None;
        const GenerationResult none = plain.generate(set.prompt_ids[p], o);
        t.none_ms = none.stats.total_ms - none.stats.prefill_ms;
        t.none_generated = none.stats.generated_tokens;
        // Both decode whole rounds past max_tokens only in the speculative arm: compare the common prefix.
        if (temperature == 0) {
          const size_t common = std::min(spec_ids.size(), none.ids.size());
          if (!std::equal(spec_ids.begin(), spec_ids.begin() + common, none.ids.begin())) {
            t.identity_failures = 1;
            std::fprintf(stderr, "GREEDY IDENTITY FAILED on prompt %zu\n", p);
          }
        }
        all.add(t);
      }
    }
    char label[32];
    std::snprintf(label, sizeof(label), "T=%.1f", temperature);
    print_row(label, all);
    failures += all.identity_failures;
  }
  // The Markov bias memo's hit count, where the drafter has one (older checkouts do not: compiled out there).
  [](const auto& d) {
    if constexpr (requires { d.markov_rows_computed(); })
      std::printf("Markov bias rows: %ld computed, %ld remembered\n", d.markov_rows_computed(),
                  d.markov_rows_remembered());
  }(*bundle.drafter);
  if (failures > 0) std::printf("greedy identity: %d FAILURES\n", failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace ts::bench
