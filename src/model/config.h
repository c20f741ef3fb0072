// Model configurations read from Hugging Face config.json files.
//
// RoPE comes in two spellings, both read by one parser (config.cc) for targets and drafters:
//   transformers <= 4.x:  top-level "rope_theta" and "rope_scaling": {"rope_type" (or "type"), "factor", ...}
//   transformers v5:      "rope_parameters": {"rope_theta", "rope_type", "factor", ...}
// The base is required in either spelling; a config without one is refused, never defaulted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ts {

enum class RopeType { Default, Linear, Llama3, Yarn };
const char* rope_type_name(RopeType type);  // "default", "linear", "llama3", "yarn"

// Everything the frequency table needs (model/rope.h computes it). Fields a type does not use keep their defaults.
struct RopeConfig {
  RopeType type = RopeType::Default;
  double theta = 10000.0;  // the base; parse_* always take it from the file (required there)
  double factor = 1.0;     // linear, llama3, yarn: the context extension factor
  // llama3 (Hugging Face _compute_llama3_parameters)
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn: the pre-training context (yarn: defaults to max_position_embeddings)
  int original_max_position_embeddings = 0;
  // yarn (Hugging Face _compute_yarn_parameters)
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;            // 0 = absent
  double mscale_all_dim = 0.0;    // 0 = absent
  double attention_factor = 0.0;  // 0 = absent: derived from factor (and mscale / mscale_all_dim)
  bool truncate = true;           // floor/ceil the correction range
};

// A decoder LM of the Qwen3 / Qwen2 / Llama family. They share one shape; the switches say how they differ.
struct ModelConfig {
  std::string architecture;        // "Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;                // read from config when present; it need not equal hidden / heads
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;
  // Positions the model accepts: config.json's max_position_embeddings, extended as vLLM does for yarn
  // (original_max_position_embeddings x factor) and linear (x factor).
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool qk_norm = false;            // Qwen3: RMSNorm over head_dim on q and k, before RoPE
  bool qkv_bias = false;           // Qwen2 (and Llama with attention_bias): biases on q, k, v projections
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
};

// Parses config.json text; `source` names the file in messages. Throws ts::Error on anything unsupported
// (unknown architecture, RoPE types other than default / linear / llama3 / yarn, a missing RoPE base,
// sliding-window attention, bad values).
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
ModelConfig load_model_config(const std::string& model_dir);

// The DSpark block drafter's config.json.
struct DrafterConfig {
  int block_size = 0;              // positions drafted per forward, anchor included
  int markov_rank = 0;             // 0 (or absent): no Markov head (DFlash-style); q is the base U[d-1] alone
  std::string markov_head_type = "vanilla";  // only "vanilla" (W2 * W1[parent]) is supported
  std::vector<int32_t> target_layer_ids;  // taps: outputs of these target layers feed the drafter's context
  int32_t mask_token_id = -1;
  int num_layers = 0;
  int hidden_size = 0;
  // The target's hidden size: set by Drafter::load from the target it is paired with. parse_drafter_config reads
  // the non-public "target_hidden_size" key only to check it (0 = absent); the tap width is
  // len(target_layer_ids) * target_hidden_size.
  int target_hidden_size = 0;
  int head_dim = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int intermediate_size = 0;
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;
  int max_position_embeddings = 0;  // 0 when the config has none
  int vocab_size = 0;
};

DrafterConfig parse_drafter_config(const std::string& json_text, const std::string& source);
DrafterConfig load_drafter_config(const std::string& drafter_dir);

// generation_config.json: the checkpoint's default sampling parameters and end-of-generation ids. A field is set
// only when the file gives it (null counts as absent). Explicit command-line flags override these (tools/cli).
struct GenerationConfig {
  bool present = false;  // the folder has a generation_config.json
  std::optional<bool> do_sample;
  std::optional<float> temperature;  // >= 0
  std::optional<float> top_p;        // (0, 1]
  std::optional<int> top_k;          // >= 0 (0 = off)
  std::optional<float> min_p;        // [0, 1]
  std::optional<float> repetition_penalty;  // (0, 10] (vLLM / HF: > 1 discourages repeats; 1 = off)
  std::optional<int> max_new_tokens;        // >= 1: the default length of a completion (vLLM's max_tokens default)
  std::vector<int32_t> eos_token_ids;  // "eos_token_id": an int or a list; empty when absent
  // Sampling keys the file sets to a non-neutral value that treespark does not implement (typical_p,
  // no_repeat_ngram_size, ...): not applied, listed so the caller can say so.
  std::vector<std::string> unsupported;
};

// Throws ts::Error on invalid JSON, a value of the wrong type or out of range (naming the key).
GenerationConfig parse_generation_config(const std::string& json_text, const std::string& source);
// model_dir/generation_config.json, or an empty config (present = false) when the folder has none.
GenerationConfig load_generation_config(const std::string& model_dir);

}  // namespace ts
