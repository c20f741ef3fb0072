#include "model/target_model.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/gguf_model.h"
#include "model/gguf_weights.h"
#include "kernels/ops.h"
#include "model/rope.h"

namespace ts {

std::unique_ptr<TargetModel> TargetModel::load(const std::string& dir, const LoadOptions& options) {
  std::unique_ptr<TargetModel> m(new TargetModel());
  m->dir_ = dir;
  LayerSource source;
  std::unique_ptr<GgufWeights> gguf_weights;
  const bool gguf = dir.size() > 5 && dir.compare(dir.size() - 5, 5, ".gguf") == 0;
  if (gguf) {
    m->gguf_ = std::make_unique<io::GgufFile>(dir);
    m->config_ = model_config_from_gguf(*m->gguf_);
    gguf_weights = std::make_unique<GgufWeights>(*m->gguf_, m->config_.head_dim);
    source = gguf_weights->layer_source();
    m->embed_table_ = gguf_weights->embedding(m->config_.vocab_size, m->config_.hidden_size, &m->embed_owned_);
  } else {
    m->config_ = load_model_config(dir);
    m->ckpt_ = std::make_unique<io::Checkpoint>(dir);
    source = checkpoint_source(*m->ckpt_);
    m->embed_table_ = m->ckpt_->weight("model.embed_tokens.weight", {m->config_.vocab_size, m->config_.hidden_size});
  }
  const ModelConfig& c = m->config_;

  m->shape_ = LayerShape{c.hidden_size, c.num_heads,   c.num_kv_heads, c.head_dim, c.intermediate_size,
                         c.rms_norm_eps, c.qk_norm,      c.qkv_bias,     {},         1.0f};
  RopeTable rope = rope_table(c.rope, c.head_dim);
  m->shape_.rope_inv_freq = std::move(rope.inv_freq);
  m->shape_.rope_attention_scale = rope.attention_scale;
  DType compute = m->embed_table_.dtype == DType::BF16 && !options.force_f32 ? DType::BF16 : DType::F32;
  m->kv_dtype_ = compute;
  m->weight_scheme_ = options.weights;
  WeightPlan plan{compute, options.weights, -1, c.num_layers};
  // Each matrix is packed into buffers of its own, so the file pages a layer's load touched are released after it
  // (io::Checkpoint::drop_resident_pages): the process never holds the checkpoint beside its packed copy, during the
  // load or after it. Only the embedding rows (and GGUF metadata) are read from the files later, a page at a time.
  const auto drop_file_pages = [&m] {
    if (m->ckpt_) m->ckpt_->drop_resident_pages();
    if (m->gguf_) m->gguf_->drop_resident_pages();
  };

  for (int l = 0; l < c.num_layers; ++l) {
    plan.layer = l;
    m->layers_.push_back(load_layer(source, cat("model.layers.", l, "."), m->shape_, plan));
    drop_file_pages();
  }
  plan.layer = -1;
  m->final_norm_ = source.vector("model.norm.weight", c.hidden_size);
  if (c.tie_word_embeddings) {
    m->lm_head_ = source.linear({"model.embed_tokens.weight"}, {c.vocab_size}, c.hidden_size, plan, MatrixRole::LmHead);
  } else {
    TS_CHECK(gguf || m->ckpt_->has("lm_head.weight"), "missing tensor 'lm_head.weight' in ", dir,
             " (config.json says tie_word_embeddings=false)");
    m->lm_head_ = source.linear({"lm_head.weight"}, {c.vocab_size}, c.hidden_size, plan, MatrixRole::LmHead);
  }
  if (gguf_weights && options.weights != WeightScheme::Native && gguf_weights->quantized_by_plan() == 0) {
    // Nothing took the requested format: say so, and label the weights by what they are (weight_format()).
    std::fprintf(stderr, "treespark: %s: weight format %s applies to none of its matrices: they are stored quantized "
                 "and run as stored\n", dir.c_str(), weight_scheme_name(options.weights));
    m->weight_scheme_ = WeightScheme::Native;
  }
  if (!gguf && options.weights != WeightScheme::Native && !m->quantized_weights()) {
    // As for GGUF above: no matrix is wide enough for the format (model/weight_plan.h), so nothing is quantized.
    m->weight_scheme_ = WeightScheme::Native;
    std::fprintf(stderr, "treespark: %s: weight format %s applies to none of its matrices (a quantized row needs a "
                 "multiple of 32 inputs): they run as %s\n", dir.c_str(), weight_scheme_name(options.weights),
                 m->weight_format().c_str());
  }
  if (gguf_weights && !gguf_weights->requantized().empty()) {
    std::fprintf(stderr, "treespark: %s: %zu fused products had parts in different formats and were re-quantized "
                 "to the finest of them (first: %s)\n", dir.c_str(), gguf_weights->requantized().size(),
                 gguf_weights->requantized()[0].c_str());
  }
  drop_file_pages();
  return m;
}

KVCache TargetModel::new_cache(int max_tokens) const {
  return KVCache(config_.num_layers, shape_.kv_heads, shape_.head_dim, max_tokens, kv_dtype_);
}

void TargetModel::set_kv_dtype(DType dtype) {
  TS_CHECK(dtype == DType::F32 || dtype == DType::BF16, "KV cache dtype must be F32 or BF16, got ", dtype_name(dtype));
  kv_dtype_ = dtype;
}

size_t TargetModel::weight_bytes() const {
  size_t bytes = lm_head_.weight_bytes();
  for (const auto& l : layers_)
    bytes += l.qkv.weight_bytes() + l.o.weight_bytes() + l.gate_up.weight_bytes() + l.down.weight_bytes();
  return bytes;
}

std::string TargetModel::weight_format() const {
  // A float checkpoint: its type. Quantized weights (--quantize's scheme, or a GGUF file's own formats, "stored"):
  // every format the projections hold, and the lm_head's.
  if (weight_scheme_ == WeightScheme::Native && !quantized_weights())
    return layers_.empty() ? lm_head_.format_name() : layers_[0].qkv.format_name();
  std::vector<std::string> formats;  // the projections' formats in order of appearance
  for (const auto& l : layers_) {
    for (const kernels::Linear* m : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      const std::string name = m->format_name();  // a stacked product's: its parts' formats, "+"-joined
      for (size_t at = 0; at <= name.size();) {
        const size_t end = std::min(name.find('+', at), name.size());
        const std::string f = name.substr(at, end - at);
        if (std::find(formats.begin(), formats.end(), f) == formats.end()) formats.push_back(f);
        at = end + 1;
      }
    }
  }
  std::string projections;
  for (const std::string& f : formats) projections += (projections.empty() ? "" : "+") + f;
  const char* scheme = weight_scheme_ == WeightScheme::Native ? "stored" : weight_scheme_name(weight_scheme_);
  return cat(scheme, " (projections ", projections, ", lm_head ", lm_head_.format_name(), ")");
}

const char* TargetModel::gemm_backend() const {
  return layers_.empty() ? lm_head_.backend_name() : layers_[0].qkv.backend_name();
}

bool TargetModel::quantized_weights() const {
  for (const auto& l : layers_)
    for (const kernels::Linear* m : {&l.qkv, &l.o, &l.gate_up, &l.down})
      if (m->quantized()) return true;
  return lm_head_.quantized();
}

void TargetModel::embed(const int32_t* tokens, int n, float* x) const {
  kernels::embed_rows(embed_table_.data, embed_table_.dtype, config_.vocab_size, config_.hidden_size, tokens, n, x);
}

void build_cache_mask(const KVCache& cache, int n_rows, const uint8_t* pending_visible, int pending_stride,
                      std::vector<uint8_t>& mask) {
  const int committed = cache.length(), pending = cache.pending(), total = committed + pending;
  mask.resize(size_t(n_rows) * total);
  for (int i = 0; i < n_rows; ++i) {
    uint8_t* row = &mask[size_t(i) * total];
    std::memset(row, 1, committed);
    for (int j = 0; j < pending; ++j)
      row[committed + j] = pending_visible ? pending_visible[size_t(i) * pending_stride + j] : uint8_t(j <= i);
  }
}

void masked_cache_attention(const LayerShape& shape, const KVCache& cache, int layer, const float* q, int n_rows,
                            const uint8_t* mask, float* out, const kernels::KVHeadHook* before_head) {
  const KVRows kv = cache.rows(layer);
  const int n_kv = cache.length() + cache.pending();
  const float scale = 1.0f / std::sqrt(float(shape.head_dim));
  TS_CHECK(cache.kv_heads() == shape.kv_heads && cache.head_dim() == shape.head_dim, "KV cache of ",
           cache.kv_heads(), " x ", cache.head_dim(), " for a layer of ", shape.kv_heads, " x ", shape.head_dim);
  kernels::attention_tiled(q, kv.spans, kv.n_spans, kv.dtype, mask, out, n_rows, n_kv, shape.heads, shape.kv_heads,
                           shape.head_dim, scale, before_head);
}

void write_pending_and_attend(const LayerShape& shape, KVCache& cache, int layer, const float* k_rows,
                              const float* v_rows, const float* q, int n_rows, const uint8_t* mask, float* out) {
  struct Write {
    KVCache* cache;
    int layer, rows;
    const float *k, *v;
  } const write{&cache, layer, n_rows, k_rows, v_rows};
  const kernels::KVHeadHook hook{[](const void* ctx, int g) {
                                   const Write& w = *static_cast<const Write*>(ctx);
                                   w.cache->write_pending_heads(w.layer, 0, w.rows, w.k, w.v, g, g + 1);
                                 },
                                 &write};
  masked_cache_attention(shape, cache, layer, q, n_rows, mask, out, &hook);
}

void cached_attention(const LayerShape& shape, const KVCache& cache, int layer, const float* q, int n_rows,
                      const uint8_t* pending_visible, int pending_stride, std::vector<uint8_t>& mask, float* out) {
  build_cache_mask(cache, n_rows, pending_visible, pending_stride, mask);
  masked_cache_attention(shape, cache, layer, q, n_rows, mask.data(), out);
}

void TargetModel::forward(const ForwardBatch& batch, const std::vector<KVCache*>& caches, ForwardResult* result) {
  const int n = int(batch.tokens.size());
  const int H = config_.hidden_size, Q = shape_.q_dim(), KV = shape_.kv_dim();
  TS_CHECK(n > 0, "empty forward batch");
  TS_CHECK(int(batch.positions.size()) == n, "positions: expected ", n, " got ", batch.positions.size());
  TS_CHECK(batch.seq.empty() || int(batch.seq.size()) == n, "seq: expected ", n, " got ", batch.seq.size());
  TS_CHECK(batch.visible.empty() || batch.visible.size() == size_t(n) * n, "visible: expected ", n, "x", n);
  for (int32_t p : batch.positions)
    TS_CHECK(p >= 0 && p < config_.max_position_embeddings, "position ", p, " outside [0, ",
             config_.max_position_embeddings, ")");
  for (int32_t l : batch.hidden_layers)
    TS_CHECK(l >= 0 && l < config_.num_layers, "hidden layer ", l, " out of range");
  for (int32_t r : batch.logit_rows) TS_CHECK(r >= 0 && r < n, "logit row ", r, " out of range");

  // Split rows into per-sequence runs [begin, end).
  struct Run {
    int seq, begin, end;
  };
  std::vector<Run> runs;
  for (int r = 0; r < n; ++r) {
    int s = batch.seq.empty() ? 0 : batch.seq[r];
    TS_CHECK(s >= 0 && s < int(caches.size()) && caches[s], "row ", r, ": no cache for sequence ", s);
    if (runs.empty() || runs.back().seq != s) {
      for (const auto& run : runs) TS_CHECK(run.seq != s, "rows of sequence ", s, " must be contiguous");
      runs.push_back({s, r, r + 1});
    } else {
      runs.back().end = r + 1;
    }
  }
  for (const auto& run : runs) caches[run.seq]->begin_append(run.end - run.begin);
  // A run's mask depends only on its cache's committed and pending row counts and the batch's visibility, the
  // same in every layer: built once per forward.
  if (run_masks_.size() < runs.size()) run_masks_.resize(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    const uint8_t* vis = batch.visible.empty() ? nullptr : &batch.visible[size_t(run.begin) * n + run.begin];
    build_cache_mask(*caches[run.seq], run.end - run.begin, vis, n, run_masks_[r]);
  }

  x_.resize(size_t(n) * H);
  q_.resize(size_t(n) * Q);
  attn_.resize(size_t(n) * Q);
  embed(batch.tokens.data(), n, x_.data());
  result->hidden.resize(batch.hidden_layers.size() * size_t(n) * H);  // every slot is written below

  // Each layer's K/V rows are computed into k_rows_ / v_rows_, then written (rounded to the cache's dtype) to the
  // pending rows of each run's cache; attention reads them back from there, as later rounds will.
  k_rows_.resize(size_t(n) * KV);
  v_rows_.resize(size_t(n) * KV);
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    scratch_.h.resize(size_t(n) * H);
    kernels::rmsnorm(x_.data(), w.input_norm.data(), scratch_.h.data(), n, H, shape_.eps);
    project_qkv(w, shape_, scratch_.h.data(), batch.positions.data(), n, scratch_, q_.data(), k_rows_.data(),
                v_rows_.data());
    for (size_t r = 0; r < runs.size(); ++r) {
      const Run& run = runs[r];
      KVCache& cache = *caches[run.seq];
      const int rows = run.end - run.begin;
      write_pending_and_attend(shape_, cache, l, &k_rows_[size_t(run.begin) * KV], &v_rows_[size_t(run.begin) * KV],
                               &q_[size_t(run.begin) * Q], rows, run_masks_[r].data(),
                               &attn_[size_t(run.begin) * Q]);
    }
    attn_out_residual(w, shape_, attn_.data(), x_.data(), n, scratch_);
    mlp_residual(w, shape_, x_.data(), n, scratch_);
    for (size_t i = 0; i < batch.hidden_layers.size(); ++i)
      if (batch.hidden_layers[i] == l)
        std::memcpy(&result->hidden[i * size_t(n) * H], x_.data(), sizeof(float) * n * H);
  }

  const int n_logits = int(batch.logit_rows.size());
  result->logits.resize(size_t(n_logits) * config_.vocab_size);
  if (n_logits == 0) return;
  normed_.resize(size_t(n_logits) * H);
  for (int i = 0; i < n_logits; ++i)
    kernels::rmsnorm(&x_[size_t(batch.logit_rows[i]) * H], final_norm_.data(), &normed_[size_t(i) * H], 1, H,
                     shape_.eps);
  lm_head_.forward(normed_.data(), n_logits, result->logits.data());
}

}  // namespace ts
