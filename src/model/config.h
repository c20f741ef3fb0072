// Model configurations read from Hugging Face config.json files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ts {

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
  float rope_theta = 10000.0f;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool qk_norm = false;            // Qwen3: RMSNorm over head_dim on q and k, before RoPE
  bool qkv_bias = false;           // Qwen2 (and Llama with attention_bias): biases on q, k, v projections
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
};

// Parses config.json text; `source` names the file in messages. Throws ts::Error on anything unsupported
// (unknown architecture, rope_scaling types other than default, sliding-window attention, bad values).
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
ModelConfig load_model_config(const std::string& model_dir);

// The DSpark block drafter's config.json.
struct DrafterConfig {
  int block_size = 0;              // positions drafted per forward, anchor included
  int markov_rank = 0;
  std::vector<int32_t> target_layer_ids;  // taps: outputs of these target layers feed the drafter's context
  int32_t mask_token_id = -1;
  int num_layers = 0;
  int hidden_size = 0;
  int target_hidden_size = 0;      // defaults to hidden_size
  int head_dim = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int intermediate_size = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  int vocab_size = 0;
};

DrafterConfig parse_drafter_config(const std::string& json_text, const std::string& source);
DrafterConfig load_drafter_config(const std::string& drafter_dir);

}  // namespace ts
