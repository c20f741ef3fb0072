#include "decode_flags.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

#include "core/cpu.h"
#include "core/error.h"

namespace ts::cli {

void DecodeFlags::add_sampling(CLI::App& app) {
  // Not given: generation_config.json's value, else the default shown.
  temperature_opt_ = app.add_option("--temperature", temperature, "sampling temperature (0 = greedy; default: "
                                    "generation_config.json, else 0)")->check(CLI::NonNegativeNumber);
  top_k_opt_ = app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off; default: "
                              "generation_config.json, else 0)")->check(CLI::NonNegativeNumber);
  top_p_opt_ = app.add_option("--top-p", top_p, "nucleus sampling mass (1 = off; default: generation_config.json, "
                              "else 1)");
  min_p_opt_ = app.add_option("--min-p", min_p, "drop tokens below min-p x the top probability (0 = off; default: "
                              "generation_config.json, else 0)");
  app.add_option("--seed", seed, "random seed");
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  app.add_option("--max-context", max_context, "context limit, prompt included")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  add_kv_dtype_option(app, &kv_dtype);
  add_quantize_option(app, &quantize);
}

void DecodeFlags::add_repetition_penalty(CLI::App& app) {
  repetition_penalty_opt_ =
      app.add_option("--repetition-penalty", repetition_penalty,
                     "vLLM/HF repetition_penalty in (0, 10]: every token of the prompt or the generated text has a "
                     "positive logit divided by it, a negative one multiplied; > 1 discourages repeats, 1 = off "
                     "(default: generation_config.json, else 1). All three penalties apply after --logit-bias and "
                     "--min-tokens, before temperature, in every mode")
          ->check(CLI::Range(0.0f, 10.0f));
}

void DecodeFlags::add_spec(CLI::App& app) {
  app.add_option("--mode", mode, "none (target only) | chain | tree")
      ->check(CLI::IsMember({"none", "chain", "tree"}));
  priority_opt_ = app.add_option("--priority", priority,
                 "tree priority: calibrated (TreeSpark) | logq (uncalibrated) | marginal (per-position U, DDTree-style)")
      ->check(CLI::IsMember({"calibrated", "logq", "marginal"}));
  app.add_option("--theta", theta, "stop growing when the best candidate's survival < theta (default 0.05)");
  app.add_option("--node-cap", node_cap, "max draft nodes per round")->check(CLI::PositiveNumber);
  app.add_option("--branch-cap", branch_cap, "max children per node")->check(CLI::PositiveNumber);
  app.add_option("--draft-len", draft_len, "chain length (default: block_size - 1)");
  add_drafter_quantize_option(app, &drafter_quantize);
  app.add_flag("--adaptive-theta", adaptive,
               "price each node with the target's cost curve L(b, k), measured at start-up and cached (load-adaptive "
               "theta; generate's default in tree mode)");
  app.add_option("--load-batch", load_batch, "batch size the adaptive theta assumes (serving load)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--fixed-calibration", fixed_calibration,
               "keep the offline calibration as fitted (default: each request refits its logit shift on its own "
               "verification labels, spec/calibration_online.h)");
}

void DecodeFlags::apply_generation_config(const GenerationConfig& generation_config) {
  SamplingOverrides given;
  auto explicit_option = [](const CLI::Option* o) { return o && o->count() > 0; };
  if (explicit_option(temperature_opt_)) given.temperature = temperature;
  if (explicit_option(top_p_opt_)) given.top_p = top_p;
  if (explicit_option(top_k_opt_)) given.top_k = top_k;
  if (explicit_option(min_p_opt_)) given.min_p = min_p;
  // Without the option registered the command applies no penalty: the file's value is not used either.
  if (!repetition_penalty_opt_ || explicit_option(repetition_penalty_opt_)) given.repetition_penalty = repetition_penalty;
  sampling = choose_sampling(given, generation_config);
  unsupported_ = generation_config.unsupported;
  temperature = sampling.params.temperature;
  top_p = sampling.params.top_p;
  top_k = sampling.params.top_k;
  min_p = sampling.params.min_p;
  repetition_penalty = sampling.repetition_penalty;
}

nlohmann::json DecodeFlags::sampling_json() const {
  auto entry = [](const nlohmann::json& value, const std::string& source) {
    return nlohmann::json{{"value", value}, {"source", source}};
  };
  // The f32 values as their shortest decimal (0.6, not 0.6000000238418579).
  auto shortest = [](float v) { return std::stod(cat(std::setprecision(7), v)); };
  nlohmann::json j{{"temperature", entry(shortest(temperature), sampling.temperature_source)},
                   {"top_p", entry(shortest(top_p), sampling.top_p_source)},
                   {"top_k", entry(top_k, sampling.top_k_source)},
                   {"min_p", entry(shortest(min_p), sampling.min_p_source)}};
  if (repetition_penalty_opt_)
    j["repetition_penalty"] = entry(shortest(repetition_penalty), sampling.repetition_penalty_source);
  if (!unsupported_.empty()) j["not_applied"] = unsupported_;  // generation_config.json keys treespark lacks
  return j;
}

std::string DecodeFlags::fall_back_without_markov(const Drafter& drafter) {
  if (drafter.has_markov_head() || mode != "tree" || priority != "calibrated") return "";
  priority = "marginal";
  return std::string("the drafter has no Markov head (markov_rank 0), so TreeSpark's calibrated priority has no "
                     "parent-conditional q to rank by; using --priority marginal") +
         (priority_opt_ && priority_opt_->count() ? " instead of the requested calibrated" : "");
}

void DecodeFlags::apply_threads(size_t weight_bytes) const {
  configure_for_model(weight_bytes, threads);
}

GenerateOptions DecodeFlags::options(int block_size) const {
  GenerateOptions o;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.min_p = min_p;
  o.sampling.seed = seed;
  o.max_new_tokens = max_tokens;
  o.max_context = max_context;
  o.mode = mode == "none" ? DecodeMode::None : mode == "chain" ? DecodeMode::Chain : tree_mode(priority);
  spec_decode::TreeShape& t = o.tree;
  t.theta = theta >= 0 ? theta : 0.05;
  t.node_cap = node_cap;
  t.branch_cap = branch_cap;
  t.draft_len = draft_len > 0 ? draft_len : std::max(1, block_size - 1);
  if (o.mode == DecodeMode::Chain) t.node_cap = t.draft_len;
  o.online_calibration = !fixed_calibration;
  return o;
}

DecodeMode tree_mode(const std::string& priority) {
  return priority == "marginal" ? DecodeMode::Marginal : priority == "logq" ? DecodeMode::LogQ : DecodeMode::Tree;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string s = text;
  for (char& c : s)
    if (c == ',' || c == '\n' || c == '\t' || c == '[' || c == ']') c = ' ';
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (...) {
      used = 0;
    }
    TS_CHECK(used == tok.size() && v >= 0 && v < (1LL << 31), "bad token id '", tok, "' (expected a non-negative integer)");
    ids.push_back(int32_t(v));
  }
  return ids;
}

void add_kv_dtype_option(CLI::App& app, std::string* choice) {
  app.add_option("--kv-dtype", *choice, "KV cache element type: auto (bf16 for a bf16 model), f32 or bf16")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
}

// CLI11 validator: "" for a weight scheme parse_weight_scheme accepts, else its error.
static std::string weight_scheme_check(const std::string& v) {
  try {
    parse_weight_scheme(v);
    return std::string();
  } catch (const Error& e) {
    return std::string(e.what());
  }
}

void add_quantize_option(CLI::App& app, std::string* choice) {
  app.add_option("--quantize", *choice,
                 "target weight format: native (the checkpoint's), q8_0, q4_0 or q4_k_m (quantized at load, round to nearest; "
                 "norms and embeddings stay as stored)")
      ->check(weight_scheme_check);
}

void add_drafter_quantize_option(CLI::App& app, std::string* choice) {
  app.add_option("--drafter-quantize", *choice,
                 "drafter weight format: auto (default: q8_0 beside a quantized target, else native), native, q8_0, "
                 "q4_0 or q4_k_m, quantized at load like --quantize; any format keeps speculation lossless, a coarser "
                 "one only changes how many drafts are accepted")
      ->check([](const std::string& v) { return v == "auto" ? std::string() : weight_scheme_check(v); });
}

void log_policy_step(const StepReport& r) {
  const std::string line = describe_policy_step(r);
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace ts::cli
