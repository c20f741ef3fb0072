// The target decoder LM (Qwen3 / Qwen2 / Llama) on the CPU.
//
// Model files expose "logits and the hidden states of layers {...}" for a flattened batch and nothing
// method-specific: draft trees reach the model only as a visibility mask.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/layer.h"

namespace ts {

// One forward's input: rows from one or several sequences. Rows of one sequence must be contiguous.
struct ForwardBatch {
  std::vector<int32_t> tokens;     // [n]
  std::vector<int32_t> positions;  // [n] RoPE positions
  std::vector<int32_t> seq;        // [n] index into the caches passed to forward(); empty = all sequence 0
  // [n, n]: visible[i * n + j] = 1 iff row i attends to row j (same sequence only). Empty = causal within each
  // sequence. Every row also sees its sequence's committed cache rows.
  std::vector<uint8_t> visible;
  std::vector<int32_t> logit_rows;     // rows whose logits are wanted
  std::vector<int32_t> hidden_layers;  // layers whose outputs (residual stream after the layer) are wanted
};

struct ForwardResult {
  std::vector<float> logits;  // [logit_rows, vocab]
  std::vector<float> hidden;  // [hidden_layers, n, hidden_size]
};

struct LoadOptions {
  // Compute type of the matrix products: F32 or BF16. Default: BF16 for bf16 checkpoints, F32 otherwise.
  bool force_f32 = false;
  // Quantize the projections and lm_head at load (model/weight_plan.h); Native keeps the checkpoint's type.
  WeightScheme weights = WeightScheme::Native;
};

class TargetModel {
 public:
  // dir: a Hugging Face folder, or a GGUF file (a path ending in .gguf: model/gguf_model.h, gguf_weights.h).
  static std::unique_ptr<TargetModel> load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  // A fresh cache for one sequence: committed plus pending rows stay <= max_tokens. Positions are limited
  // separately by max_position_embeddings, so room for a draft tree's pending rows may go past it.
  KVCache new_cache(int max_tokens) const;
  // Element type of the caches new_cache makes: BF16 for a bf16 model, F32 otherwise, unless set (F32 or BF16).
  DType kv_dtype() const { return kv_dtype_; }
  void set_kv_dtype(DType dtype);

  // Appends each row's K/V to its sequence's cache as pending rows (the caller then commits the rows to keep).
  void forward(const ForwardBatch& batch, const std::vector<KVCache*>& caches, ForwardResult* result);

  size_t weight_bytes() const;  // bytes of packed weights read by one forward (embedding rows excluded)
  WeightScheme weight_scheme() const { return weight_scheme_; }
  // "bf16", "f32", or the scheme and what it gave, e.g. "q4_0 (projections Q4_0, lm_head Q8_0)"; a GGUF file's
  // own quantized formats as e.g. "stored (projections Q4_K+Q6_K, lm_head Q6_K)".
  std::string weight_format() const;
  // Whether any projection is quantized (by --quantize or as stored in a GGUF file).
  bool quantized_weights() const;
  // The GEMM the projections run under the active kernel variant, e.g. "qgemm-avx512-vnni" or "packed-avx2-bf16".
  const char* gemm_backend() const;

 private:
  TargetModel() = default;
  void embed(const int32_t* tokens, int n, float* x) const;

  std::string dir_;
  ModelConfig config_;
  LayerShape shape_;
  std::unique_ptr<io::Checkpoint> ckpt_;  // mapped; the embedding table is read from it in place
  std::unique_ptr<io::GgufFile> gguf_;     // or this (a .gguf target)
  std::vector<uint16_t> embed_owned_;      // [vocab, hidden] bf16, for a quantized GGUF embedding table
  io::TensorRef embed_table_;              // [vocab, hidden], in a mapping or in embed_owned_
  std::vector<LayerWeights> layers_;
  std::vector<float> final_norm_;  // [hidden]
  kernels::Linear lm_head_;        // [vocab, hidden]
  DType kv_dtype_ = DType::F32;
  WeightScheme weight_scheme_ = WeightScheme::Native;

  // Scratch, reused between calls.
  LayerScratch scratch_;
  std::vector<float> x_;       // [n, hidden] residual stream
  std::vector<float> q_;       // [n, q_dim]
  std::vector<float> attn_;    // [n, q_dim]
  std::vector<std::vector<uint8_t>> run_masks_;  // [runs][rows of the run, its cache rows]
  std::vector<float> k_rows_, v_rows_;           // [n, kv_dim] this layer's K/V rows before they enter the caches
  std::vector<float> normed_;                     // [logit rows, hidden]
};

// Attention of one sequence's batch rows against its cache (committed rows all visible, pending rows per the
// batch's visibility). q: [n_rows, q_dim] -> out: [n_rows, q_dim]. Shared by the target and the drafter.
// = build_cache_mask + masked_cache_attention; a forward that runs several layers over the same rows builds the
// mask once and calls masked_cache_attention per layer.
void cached_attention(const LayerShape& shape, const KVCache& cache, int layer, const float* q, int n_rows,
                      const uint8_t* pending_visible /*[n_rows, pending] or null = causal*/, int pending_stride,
                      std::vector<uint8_t>& mask_scratch, float* out);
// mask: resized to [n_rows, cache rows]: 1 for every committed row, pending rows per pending_visible ([n_rows,
// pending] with row stride pending_stride; null = causal).
void build_cache_mask(const KVCache& cache, int n_rows, const uint8_t* pending_visible, int pending_stride,
                      std::vector<uint8_t>& mask);
// Attention against the cache's committed + pending rows under a mask from build_cache_mask.
void masked_cache_attention(const LayerShape& shape, const KVCache& cache, int layer, const float* q, int n_rows,
                            const uint8_t* mask, float* out, const kernels::KVHeadHook* before_head = nullptr);
// The layer's pending rows [0, n_rows) written (k_rows, v_rows: [n_rows, kv_dim]), then masked_cache_attention over
// them: each KV head's rows are written by the thread that attends over that head (kernels/kv_span.h), so they do
// not move between cores. The same bits as write_pending, then masked_cache_attention.
void write_pending_and_attend(const LayerShape& shape, KVCache& cache, int layer, const float* k_rows,
                              const float* v_rows, const float* q, int n_rows, const uint8_t* mask, float* out);

}  // namespace ts
