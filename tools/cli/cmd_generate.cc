// treespark generate: plain or speculative generation, streamed as it goes, statistics at the end.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/timer.h"
#include "decode_flags.h"
#include "engine/cost_cache.h"
#include "engine/model_bundle.h"
#include "tokenizer/tokenizer.h"

namespace ts::cli {

namespace {

nlohmann::json stats_json(const GenerationResult& r) {
  const GenerationStats& s = r.stats;
  nlohmann::json j;
  j["rounds"] = s.rounds;
  j["target_forwards"] = s.target_forwards;
  j["generated_tokens"] = s.generated_tokens;
  j["accepted_draft_tokens"] = s.accepted_draft_tokens;
  j["predicted_draft_tokens"] = s.predicted_draft_tokens;
  j["calibration_shifts"] = s.calibration_shifts;  // online refit per sibling-rank bucket (empty: fixed)
  j["tokens_per_round"] = s.tokens_per_round();
  j["mean_tree_size"] = s.mean_tree_size();
  j["prefill_ms"] = s.prefill_ms;
  j["draft_ms"] = s.draft_ms;
  j["expand_ms"] = s.expand_ms;
  j["verify_ms"] = s.verify_ms;
  j["total_ms"] = s.total_ms;
  const double decode_ms = s.total_ms - s.prefill_ms;
  j["tokens_per_second"] = decode_ms > 0 ? 1000.0 * s.generated_tokens / decode_ms : 0.0;
  j["finish_reason"] = r.finish_reason;
  // rounds whose accepted path had length d, d = 0..block_size (vLLM reports the same per position)
  j["accepted_length_histogram"] = s.accepted_at_depth;
  return j;
}

// "ID:BIAS" -> (id, bias); the engine checks the range of both.
std::pair<int32_t, float> parse_logit_bias(const std::string& text) {
  const size_t colon = text.find(':');
  TS_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size(), "--logit-bias expects ID:BIAS, got '",
           text, "'");
  try {
    size_t used_id = 0, used_bias = 0;
    const std::string id_text = text.substr(0, colon), bias_text = text.substr(colon + 1);
    const long id = std::stol(id_text, &used_id);
    const float bias = std::stof(bias_text, &used_bias);
    TS_CHECK(used_id == id_text.size() && used_bias == bias_text.size(), "trailing characters");
    return {int32_t(id), bias};
  } catch (const std::exception&) {
    TS_FAIL("--logit-bias expects ID:BIAS (an integer token id and a number), got '", text, "'");
  }
}

// One entry per emitted token: {"id": id, "logprob": lp, "top": [[id, lp], ...]} (-inf is written as null).
nlohmann::json logprobs_json(const GenerationResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < r.logprobs.size() && i < r.ids.size(); ++i) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : r.logprobs[i].top) top.push_back({id, lp});
    out.push_back({{"id", r.ids[i]}, {"logprob", r.logprobs[i].logprob}, {"top", top}});
  }
  return out;
}

// Without --json, one line per emitted token on stderr: "logprobs <index> <id> <logprob> | <id>:<lp> ...".
void print_logprobs(const GenerationResult& r) {
  for (size_t i = 0; i < r.logprobs.size() && i < r.ids.size(); ++i) {
    std::fprintf(stderr, "logprobs %zu %d %.6f |", i, r.ids[i], double(r.logprobs[i].logprob));
    for (const auto& [id, lp] : r.logprobs[i].top) std::fprintf(stderr, " %d:%.6f", id, double(lp));
    std::fprintf(stderr, "\n");
  }
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate tokens with the target alone (--mode none) or with speculative decoding."};
  std::string model_dir, drafter_dir, prompt_ids, prompt;
  bool chat = false, no_thinking = false, json = false, compare = false, fixed_theta = false;
  int n = 1, logprobs = -1, min_tokens = 0;
  float presence_penalty = 0, frequency_penalty = 0;
  std::vector<std::string> logit_bias;
  DecodeFlags flags;
  app.add_option("--model", model_dir, "target model folder (Hugging Face layout)")->required();
  app.add_option("--drafter", drafter_dir, "DSpark drafter folder (needed for chain/tree modes)");
  app.add_option("--prompt-ids", prompt_ids, "prompt as token ids: 1,2,3");
  app.add_option("--prompt", prompt, "prompt text (needs tokenizer.json in the model folder)");
  app.add_flag("--chat", chat, "wrap --prompt as a user message in the model's chat template");
  app.add_flag("--no-thinking", no_thinking, "chat template with enable_thinking=false");
  app.add_option("--n", n, "independent completions (seeds seed, seed+1, ...)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "one JSON object per completion, one per line");
  std::string log_level = "info";
  app.add_option("--log-level", log_level,
                 "info: start-up decisions; debug: also one line per engine step on stderr (theta, tree size and "
                 "accepted drafts, predicted vs actual ms), as serve's")
      ->check(CLI::IsMember({"info", "debug"}));
  app.add_flag("--compare", compare,
               "after each speculative completion, decode the same prompt with the target alone (same sampling "
               "and seed) and print both speeds side by side, both timed after a short warm-up (so the side run "
               "first does not pay the process's one-off costs alone); at temperature 0 the texts must be identical");
  app.add_option("--logprobs", logprobs,
                 "report each emitted token's logprob and the K most likely alternatives (K in 0..20): log_softmax "
                 "of the target's logits after --logit-bias, the --min-tokens mask and the penalties, before "
                 "temperature and top-k/top-p/min-p. With --json: \"logprobs\": [{\"id\", \"logprob\", \"top\": "
                 "[[id, lp], ...]}]; else one line per token on stderr: logprobs INDEX ID LOGPROB | ID:LP ...")
      ->check(CLI::Range(0, kMaxTopLogprobs));
  app.add_option("--logit-bias", logit_bias,
                 "ID:BIAS, repeatable: add BIAS (in [-100, 100]) to token ID's logit before sampling, in every mode");
  app.add_option("--min-tokens", min_tokens,
                 "the stop tokens (eos) cannot be emitted before this many tokens are generated (<= --max-tokens)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--presence-penalty", presence_penalty,
                 "OpenAI presence_penalty in [-2, 2]: subtracted once from the logit of every token already "
                 "generated (not the prompt); > 0 discourages repeats")
      ->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--frequency-penalty", frequency_penalty,
                 "OpenAI frequency_penalty in [-2, 2]: subtracted from a token's logit once per time it was "
                 "generated (not the prompt); > 0 discourages repeats")
      ->check(CLI::Range(-2.0f, 2.0f));
  flags.add_repetition_penalty(app);
  flags.add_sampling(app);
  flags.add_spec(app);
  app.add_flag("--fixed-theta", fixed_theta,
               "tree mode: grow every round to the fixed --theta (default 0.05) instead of pricing nodes with the "
               "cost curve (the default, as --adaptive-theta; a --theta given alone also means fixed)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  TS_CHECK(!(fixed_theta && flags.adaptive), "--fixed-theta and --adaptive-theta exclude each other");

  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, flags.quantize, flags.drafter_quantize);
  flags.apply_threads(bundle.target->weight_bytes());  // may change the kernel variant: the summary names its GEMM
  if (bundle.target->quantized_weights() || parse_weight_scheme(flags.quantize) != WeightScheme::Native)
    std::fprintf(stderr, "treespark: %s\n", bundle.weights_summary().c_str());
  bundle.set_kv_dtype(flags.kv_dtype);
  if (drafter_dir.empty() && flags.mode != "none") {
    if (!app.count("--mode")) {
      flags.mode = "none";  // no drafter given: plain decoding
    } else {
      TS_FAIL("--mode ", flags.mode, " needs --drafter");
    }
  }
  flags.apply_generation_config(bundle.generation_config);
  const std::string fallback = bundle.drafter ? flags.fall_back_without_markov(*bundle.drafter) : "";
  if (!fallback.empty()) std::fprintf(stderr, "treespark: %s\n", fallback.c_str());
  GenerateOptions opt = flags.options(bundle.drafter ? bundle.drafter->block_size() : 1);
  opt.stop_ids = bundle.stop_ids();
  opt.logprobs = logprobs;
  opt.min_tokens = min_tokens;
  opt.presence_penalty = presence_penalty;
  opt.frequency_penalty = frequency_penalty;
  opt.repetition_penalty = flags.repetition_penalty;  // 0 passes the range check; choose_sampling refuses it
  for (const std::string& entry : logit_bias) opt.logit_bias.push_back(parse_logit_bias(entry));
  // Tree mode prices each node with the target's measured cost curve unless a fixed theta was asked for: on the
  // shipped pair a fixed theta of 0.05 grew ~30-node trees whose verification cost more than they saved (Xeon family
  // 6 model 207: 200 tok/s against 420-434 adaptive and 165 for the target alone; bench spec: 0.90x the target
  // alone). The curve is measured once per machine, model and thread count (1.7 s there) and cached.
  const bool adaptive = flags.mode == "tree" && !fixed_theta && (flags.adaptive || flags.theta < 0);
  CostModel cost;
  if (adaptive) {
    TS_CHECK(bundle.drafter, "--adaptive-theta needs --drafter");
    CostCacheOptions co;
    co.model_dir = model_dir;
    co.drafter_dir = drafter_dir;
    co.batches = {1};
    if (flags.load_batch > 1) co.batches.push_back(flags.load_batch);
    const CostCacheResult measured = cached_cost_model(*bundle.target, bundle.drafter.get(), co);
    std::fprintf(stderr, "treespark: %s\n", measured.log.c_str());
    opt.fixed_pricing = RequestOptions::FixedPricing{measured.cost, flags.load_batch, 0};
  }
  std::vector<int32_t> ids = bundle.prompt_ids(parse_ids(prompt_ids), prompt, chat, !no_thinking);
  Generator generator(*bundle.target, bundle.drafter.get(),
                      bundle.calibration.lookup(flags.temperature, {flags.top_k, flags.top_p, flags.min_p}));
  if (log_level == "debug") {
    generator.set_on_step(log_policy_step);
    if (bundle.drafter) std::fprintf(stderr, "treespark: %s\n", bundle.calibration_summary().c_str());
  }
  generator.set_emit_vocab(bundle.emit_vocab());

  for (int i = 0; i < n; ++i) {
    opt.sampling.seed = flags.seed + uint64_t(i);
    std::unique_ptr<tok::StreamDecoder> stream;
    if (!json && bundle.tokenizer) stream = std::make_unique<tok::StreamDecoder>(*bundle.tokenizer);
    auto on_token = [&](int32_t id) {
      if (json) return;
      if (stream) {
        std::string piece = stream->push(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
      } else {
        std::printf("%d ", id);
      }
      std::fflush(stdout);
    };
    // Comparing: both sides timed after the one-off costs, which the side run first would otherwise pay alone.
    const bool comparing = compare && opt.mode != DecodeMode::None;
    const double warm_up_ms = comparing ? bundle.warm_up() : 0.0;
    GenerationResult r = generator.generate(ids, opt, on_token);
    GenerationResult alone;
    if (comparing) {
      GenerateOptions plain = opt;
      plain.mode = DecodeMode::None;
      alone = generator.generate(ids, plain);
    }
    if (json) {
      nlohmann::json j = stats_json(r);
      j["ids"] = r.ids;
      j["prompt_tokens"] = ids.size();
      j["mode"] = flags.mode;
      if (is_tree(opt.mode))
        j["theta"] = adaptive ? nlohmann::json("adaptive") : nlohmann::json(opt.tree.theta);
      j["priority"] = flags.priority;
      if (!fallback.empty()) j["fallback"] = fallback;
      j["sampling"] = flags.sampling_json();  // each value and where it came from (flag, generation_config.json, default)
      if (bundle.tokenizer) j["text"] = bundle.decode(r.ids);
      if (opt.logprobs >= 0) j["logprobs"] = logprobs_json(r);
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      if (stream) {
        std::string rest = stream->flush();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
      }
      const GenerationStats& s = r.stats;
      const double decode_ms = s.total_ms - s.prefill_ms;
      std::fprintf(stdout, "\n");
      std::fflush(stdout);  // the statistics go to stderr: keep them after the text
      if (opt.logprobs >= 0) print_logprobs(r);
      std::fprintf(stderr,
                   "[%s] %d tokens in %.1f ms (%.1f tok/s after a %.1f ms prefill of %zu tokens); %d rounds, %.2f "
                   "tokens/round, mean tree %.1f nodes, %d accepted draft tokens\n",
                   flags.mode.c_str(), s.generated_tokens, s.total_ms,
                   decode_ms > 0 ? 1000.0 * s.generated_tokens / decode_ms : 0.0, s.prefill_ms, ids.size(),
                   s.rounds, s.tokens_per_round(), s.mean_tree_size(), s.accepted_draft_tokens);
    }
    if (comparing) {
      auto tok_s = [](const GenerationStats& st) {
        const double ms = st.total_ms - st.prefill_ms;
        return ms > 0 ? 1000.0 * st.generated_tokens / ms : 0.0;
      };
      const double spec_tps = tok_s(r.stats), alone_tps = tok_s(alone.stats);
      const bool greedy = opt.sampling.temperature <= 0.0f;
      const bool same = alone.ids == r.ids;
      std::fprintf(stderr, "TreeSpark (%s) %.1f tok/s | target alone %.1f tok/s | %.2fx%s (both after a %.0f ms warm-up)\n",
                   flags.mode.c_str(), spec_tps, alone_tps, alone_tps > 0 ? spec_tps / alone_tps : 0.0,
                   greedy ? (same ? "; greedy texts identical (lossless)" : "; GREEDY TEXTS DIFFER") : "", warm_up_ms);
      if (greedy && !same) return 1;  // a lossless engine never gets here: make it loud
    }
  }
  return 0;
}

}  // namespace ts::cli
