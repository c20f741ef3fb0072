// Targets from GGUF files (llama.cpp's format): the ModelConfig, the tensor names, and the Q/K row order.
//
// What llama.cpp's converter (convert_hf_to_gguf.py: conversion/base.py, llama.py, qwen.py) does to a Hugging Face
// checkpoint, and what this file undoes:
//   - config.json becomes "{arch}.*" metadata (general.architecture qwen3 / qwen2 / llama). Llama-3 RoPE scaling is
//     not stored as metadata: the converter writes its per-frequency factors as the tensor rope_freqs.weight.
//   - tensors are renamed (token_embd.weight, blk.N.attn_q.weight, ...; gguf_tensor_to_hf()).
//   - for arch "llama" only, the rows of q_proj and k_proj (weights and biases) are permuted per head
//     (LlamaModel.permute) because llama.cpp applies Llama's RoPE to adjacent pairs (x[2i], x[2i+1]) where
//     Hugging Face rotates the halves (x[i], x[i + d/2]). Qwen2 and Qwen3 use llama.cpp's NEOX RoPE (halves,
//     as Hugging Face) and are written unpermuted.
// Shapes: a GGUF matrix of ne = [cols, rows] is the Hugging Face [rows, cols] weight (io/gguf.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"

namespace ts {

// The config as parse_model_config() would read the source checkpoint's config.json:
//   architecture   general.architecture qwen3 / qwen2 / llama -> "Qwen3ForCausalLM" / "Qwen2ForCausalLM" /
//                  "LlamaForCausalLM" (a Mistral GGUF is "llama")
//   vocab_size     rows of token_embd.weight (the embedding size; {arch}.vocab_size and the token list, when
//                  present, are checked against it: equal, and no longer, respectively)
//   hidden / intermediate / layers / heads / kv heads: {arch}.embedding_length, feed_forward_length,
//                  block_count, attention.head_count, attention.head_count_kv (default: head_count)
//   head_dim       {arch}.attention.key_length (default embedding_length / head_count); value_length and
//                  rope.dimension_count must equal it (partial rotary is not supported)
//   rms_norm_eps   {arch}.attention.layer_norm_rms_epsilon
//   rope           theta = {arch}.rope.freq_base (required, as config.cc requires rope_theta);
//                  rope.scaling.type "linear" (factor) / "yarn" (factor, original_context_length, yarn_beta_fast,
//                  yarn_beta_slow, yarn_attn_factor -> attention_factor); "none" or absent: default, unless
//                  rope_freqs.weight is present: llama3, its parameters recovered by llama3_rope_from_factors()
//   max_position_embeddings  {arch}.context_length, extended for yarn / linear exactly as config.cc does
//   tie_word_embeddings      no output.weight tensor
//   qk_norm        arch qwen3;  qkv_bias: arch qwen2, or blk.0.attn_q.bias present
//   bos_token_id   tokenizer.ggml.bos_token_id (-1 when absent)
//   eos_token_ids  tokenizer.ggml.eos_token_id, then eot_token_id and eom_token_id when present and different
//                  (a GGUF keeps one eos; Llama-3.1's config.json lists the turn ends too)
// Throws ts::Error naming the file and the key (or tensor) on an unsupported architecture or scaling type, a
// missing required key, or inconsistent values.
ModelConfig model_config_from_gguf(const io::GgufFile& gguf);

// Llama-3 RoPE from the converter's rope_freqs.weight: factors[i] scales wavelength i (theta^(2i/head_dim) * 2 pi):
// 1 above the high-frequency cutoff, `factor` below the low-frequency one, smooth in between. Only the ratios
// original_max / low_freq_factor and original_max / high_freq_factor shape the table, so low_freq_factor is taken
// as 1 (every Llama 3.x); with two or more smooth entries high_freq_factor and original_max are solved exactly,
// with one or none high_freq_factor is taken as 4 and original_max solved or bracketed (any value in the
// bracket gives the same table). The result is recomputed and compared with `factors` (relative 1e-4); all ones
// give RopeType::Default. `source` names the file in errors.
RopeConfig llama3_rope_from_factors(const std::vector<float>& factors, double theta, int head_dim,
                                    const std::string& source);

// --- tensor names ----------------------------------------------------------------------------------------------

// How a GGUF tensor's rows relate to the Hugging Face tensor's.
enum class GgufRowOrder {
  Same,          // row r is row r
  LlamaRopeQK,   // per head of head_dim rows, permuted by LlamaModel.permute: see llama_rope_hf_row_to_gguf_row()
};

struct GgufTensorMapping {
  std::string hf_name;  // "model.layers.3.self_attn.q_proj.weight"; "" for rope_freqs.weight (read by the config)
  GgufRowOrder rows = GgufRowOrder::Same;
};

// The Hugging Face name of GGUF tensor `gguf_name` for architecture `gguf_arch` (general.architecture):
//   token_embd.weight -> model.embed_tokens.weight      output_norm.weight -> model.norm.weight
//   output.weight -> lm_head.weight                     rope_freqs.weight -> "" (llama only; a config input)
//   blk.N.attn_norm.weight -> model.layers.N.input_layernorm.weight
//   blk.N.ffn_norm.weight -> model.layers.N.post_attention_layernorm.weight
//   blk.N.attn_{q,k,v}.{weight,bias} -> model.layers.N.self_attn.{q,k,v}_proj.{weight,bias}
//   blk.N.attn_output.{weight,bias} -> model.layers.N.self_attn.o_proj.{weight,bias}
//   blk.N.attn_{q,k}_norm.weight -> model.layers.N.self_attn.{q,k}_norm.weight   (qwen3)
//   blk.N.ffn_{gate,up,down}.weight -> model.layers.N.mlp.{gate,up,down}_proj.weight
// nullopt for any other name (fused attn_qkv, MoE experts, per-layer rope_freqs, other architectures' tensors).
std::optional<GgufTensorMapping> gguf_tensor_to_hf(const std::string& gguf_name, const std::string& gguf_arch);
// The inverse: the GGUF name holding Hugging Face tensor `hf_name` (nullopt when none of the above).
std::optional<std::string> hf_tensor_to_gguf(const std::string& hf_name);

// --- Llama Q/K row permutation ---------------------------------------------------------------------------------
//
// LlamaModel.permute(w, n_head, n_head_kv) reshapes w [heads * head_dim, ...] to [heads, 2, head_dim/2, ...], swaps
// the two middle axes and flattens back. Within one head, with half = head_dim / 2:
//   GGUF row 2i + j  holds  Hugging Face row j * half + i      (i < half, j in {0, 1})
// i.e. the GGUF head interleaves the two halves of the Hugging Face head. Heads stay in place, so the map needs
// only head_dim (for attn_k, the key head_dim; both equal {arch}.attention.key_length). Every row of a GGUF
// tensor (any ggml type, quantized included) is stored on its own, so the loader reorders whole rows:
//   for hf_row in [0, rows): copy GGUF row llama_rope_hf_row_to_gguf_row(hf_row, head_dim) to position hf_row.
// Biases are permuted the same way (one value per row).

// The GGUF row holding Hugging Face row `hf_row` (any row of the tensor; head_dim even, > 0).
int64_t llama_rope_hf_row_to_gguf_row(int64_t hf_row, int64_t head_dim);
// The Hugging Face row that GGUF row `gguf_row` holds (the inverse of the above).
int64_t llama_rope_gguf_row_to_hf_row(int64_t gguf_row, int64_t head_dim);
// Writes rows [rows] of `row_bytes` each from `gguf_rows` (GGUF order) to `hf_rows` (Hugging Face order);
// rows must be a multiple of head_dim (checked: ts::Error). The buffers must not overlap.
void llama_rope_unpermute_rows(const uint8_t* gguf_rows, uint8_t* hf_rows, int64_t rows, size_t row_bytes,
                               int64_t head_dim);

}  // namespace ts
