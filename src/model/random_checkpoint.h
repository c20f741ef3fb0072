// Random-weight checkpoints in Hugging Face layout, for tests, benchmarks and the no-download demo.
// Weights are scaled so activations stay O(1) through the layers and logits are neither flat nor one-hot.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace ts {

// Writes dir/config.json and dir/model.safetensors (creating dir). dtype: F32, F16 or BF16. RoPE is written as
// top-level rope_theta + rope_scaling (null for the default type).
void write_random_model(const std::string& dir, const ModelConfig& config, DType dtype, uint64_t seed);
// Writes a DSpark-layout drafter folder for a target of hidden size config.target_hidden_size (fc.weight's width;
// the key itself is not written, as in published drafters). RoPE goes in transformers v5 "rope_parameters";
// markov_rank 0 writes a drafter without a Markov head.
void write_random_drafter(const std::string& dir, const DrafterConfig& config, DType dtype, uint64_t seed);

std::string model_config_json(const ModelConfig& config, DType dtype);
std::string drafter_config_json(const DrafterConfig& config);

// A tiny Qwen3 config for tests: vocab, hidden, layers as given; 4 q heads, 2 kv heads, head_dim 16.
ModelConfig tiny_qwen3_config(int vocab, int hidden, int layers);
// A DSpark drafter config of block size `block` over a target of (vocab, hidden, layers): rank-4 Markov head, taps
// at the first and last layer, one layer of 4 heads of 16 (callers may reshape it before writing).
DrafterConfig tiny_drafter_config(int vocab, int hidden, int layers, int block);

}  // namespace ts
