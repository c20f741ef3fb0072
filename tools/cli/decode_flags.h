// Flags shared by generate, calibrate and bench spec: sampling and speculative-decoding parameters.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/metrics.h"
#include "engine/sampling_defaults.h"
#include "model/config.h"
#include "model/drafter.h"

namespace ts::cli {

struct DecodeFlags {
  float temperature = 0, top_p = 1, min_p = 0;
  float repetition_penalty = 1;      // only where add_repetition_penalty registered --repetition-penalty
  int top_k = 0;
  uint64_t seed = 0;
  int max_tokens = 64;
  int max_context = 4096;
  std::string mode = "tree";         // none | chain | tree
  std::string priority = "calibrated";  // calibrated | logq | marginal
  double theta = -1;                 // < 0: the documented default for the mode
  int node_cap = 32, branch_cap = 4, draft_len = -1;
  bool adaptive = false;
  int load_batch = 1;                // the serving load the adaptive theta prices nodes for
  bool fixed_calibration = false;    // --fixed-calibration: no online refit of the calibration's shift
  int threads = 0;
  std::string kv_dtype = "auto";     // auto | f32 | bf16 (ModelBundle::set_kv_dtype)
  std::string quantize = "native";   // native | q8_0 | q4_0 | q4_k_m (model/weight_plan.h)
  std::string drafter_quantize = "auto";  // the drafter's format (add_spec's --drafter-quantize)

  void add_sampling(CLI::App& app);
  void add_spec(CLI::App& app);
  // --repetition-penalty (generate): not given, generation_config.json's value, else 1.
  void add_repetition_penalty(CLI::App& app);
  // After parsing: temperature, top_p, top_k, min_p (and repetition_penalty where registered) not given as flags
  // come from generation_config.json (see choose_sampling); `sampling` records each value's source.
  void apply_generation_config(const GenerationConfig& generation_config);
  // {"temperature": {"value": v, "source": s}, "top_p": ..., "top_k": ..., "min_p": ...} (and "repetition_penalty"
  // where registered), plus "not_applied":
  // [keys] when generation_config.json sets sampling options treespark does not implement.
  nlohmann::json sampling_json() const;
  // --mode tree with the calibrated (TreeSpark) priority needs a Markov head (parent-conditional q). Without one
  // the priority falls back to marginal; returns why ("" when nothing changed).
  std::string fall_back_without_markov(const Drafter& drafter);
  // Sets the thread count: --threads, else default_threads() (core/thread_pool.h).
  void apply_threads(size_t weight_bytes) const;
  // Builds generation options; block_size bounds the chain length default.
  GenerateOptions options(int block_size) const;

  SamplingChoice sampling;  // filled by apply_generation_config

 private:
  CLI::Option *temperature_opt_ = nullptr, *top_p_opt_ = nullptr, *top_k_opt_ = nullptr, *min_p_opt_ = nullptr;
  CLI::Option* repetition_penalty_opt_ = nullptr;
  CLI::Option* priority_opt_ = nullptr;
  std::vector<std::string> unsupported_;  // generation_config.json sampling keys not applied
};

// --priority calibrated | logq | marginal as the tree mode it selects.
DecodeMode tree_mode(const std::string& priority);

std::vector<int32_t> parse_ids(const std::string& text);

// --kv-dtype auto|f32|bf16 (engine/model_bundle.h, parse_kv_dtype), for every command that loads a model.
void add_kv_dtype_option(CLI::App& app, std::string* choice);  // "1,2,3" or "1 2 3"
// --quantize native|q8_0|q4_0|q4_k_m: the target's weight format, quantized at load (model/weight_plan.h).
void add_quantize_option(CLI::App& app, std::string* choice);
// --drafter-quantize auto|native|q8_0|q4_0|q4_k_m: the drafter's weight format (model/drafter.h;
// resolve_drafter_weights in engine/model_bundle.h says what auto gives).
void add_drafter_quantize_option(CLI::App& app, std::string* choice);

// --log-level debug (generate, serve): describe_policy_step's line for one engine step on stderr.
void log_policy_step(const StepReport& r);

}  // namespace ts::cli
