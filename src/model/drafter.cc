#include "model/drafter.h"

#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/target_model.h"

namespace ts {

std::unique_ptr<Drafter> Drafter::load(const std::string& dir) {
  std::unique_ptr<Drafter> d(new Drafter());
  d->config_ = load_drafter_config(dir);
  const DrafterConfig& c = d->config_;
  d->ckpt_ = std::make_unique<io::Checkpoint>(dir);
  const io::Checkpoint& ckpt = *d->ckpt_;
  const int H = c.hidden_size, V = c.vocab_size;
  d->shape_ = LayerShape{H, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rms_norm_eps,
                         /*qk_norm=*/true, /*qkv_bias=*/false};
  d->shape_.rope_inv_freq.resize(c.head_dim / 2);
  kernels::rope_default_inv_freq(c.rope_theta, c.head_dim, d->shape_.rope_inv_freq.data());
  d->embed_table_ = &ckpt.weight("embed_tokens.weight", {V, H});
  const DType compute = d->embed_table_->dtype == DType::BF16 ? DType::BF16 : DType::F32;
  d->fc_ = load_linear(ckpt, {"fc.weight"}, {H}, d->tap_width(), compute);
  d->hidden_norm_ = load_vector(ckpt, "hidden_norm.weight", H);
  for (int l = 0; l < c.num_layers; ++l) d->layers_.push_back(load_layer(ckpt, cat("layers.", l, "."), d->shape_, compute));
  d->final_norm_ = load_vector(ckpt, "norm.weight", H);
  d->lm_head_ = load_linear(ckpt, {"lm_head.weight"}, {V}, H, compute);
  d->markov_w1_ = io::to_f32(ckpt.weight("markov_head.markov_w1.weight", {V, c.markov_rank}));
  // The Markov bias is part of q: keep it in f32 so the draft distribution is as the reference computes it.
  d->markov_w2_ = load_linear(ckpt, {"markov_head.markov_w2.weight"}, {V}, c.markov_rank, DType::F32);
  return d;
}

DrafterState Drafter::new_state(int max_tokens) const {
  return DrafterState{KVCache(config_.num_layers, shape_.kv_dim(), max_tokens + config_.block_size)};
}

void Drafter::embed(const int32_t* tokens, int n, float* x) const {
  kernels::embed_rows(embed_table_->data, embed_table_->dtype, config_.vocab_size, config_.hidden_size, tokens, n, x);
}

void Drafter::extend_context(DrafterState& state, const float* taps, const int32_t* positions, int n) {
  if (n == 0) return;
  const int H = config_.hidden_size, Q = shape_.q_dim(), KV = shape_.kv_dim();
  ctx_.resize(size_t(n) * H);
  fc_.forward(taps, n, ctx_.data());
  kernels::rmsnorm(ctx_.data(), hidden_norm_.data(), ctx_.data(), n, H, shape_.eps);
  KVCache& cache = state.context;
  cache.begin_append(n);
  q_.resize(size_t(n) * Q);
  // The context enters every layer's k/v directly (no input norm); the q part of the fused product is unused.
  for (int l = 0; l < config_.num_layers; ++l) {
    const size_t at = size_t(cache.length()) * KV;
    project_qkv(layers_[l], shape_, ctx_.data(), positions, n, scratch_, q_.data(), cache.keys(l) + at,
                cache.values(l) + at);
  }
  cache.commit_all();
}

void Drafter::draft_block(DrafterState& state, int32_t anchor, int32_t anchor_pos, float* base_logits) {
  const int B = config_.block_size, H = config_.hidden_size, Q = shape_.q_dim(), KV = shape_.kv_dim();
  std::vector<int32_t> tokens(B, config_.mask_token_id), positions(B);  // [B]
  tokens[0] = anchor;
  for (int i = 0; i < B; ++i) positions[i] = anchor_pos + i;
  x_.resize(size_t(B) * H);
  q_.resize(size_t(B) * Q);
  attn_.resize(size_t(B) * Q);
  embed(tokens.data(), B, x_.data());
  KVCache& cache = state.context;
  std::vector<uint8_t> all_visible(size_t(B) * B, 1);  // [B, B]: the block attends to itself without a mask
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    cache.begin_append(B);  // the block's k/v live as pending rows for this layer only
    const size_t at = size_t(cache.length()) * KV;
    scratch_.h.resize(size_t(B) * H);
    kernels::rmsnorm(x_.data(), w.input_norm.data(), scratch_.h.data(), B, H, shape_.eps);
    project_qkv(w, shape_, scratch_.h.data(), positions.data(), B, scratch_, q_.data(), cache.keys(l) + at,
                cache.values(l) + at);
    cached_attention(shape_, cache, l, q_.data(), B, all_visible.data(), B, mask_, attn_.data());
    cache.drop_pending();
    attn_out_residual(w, shape_, attn_.data(), x_.data(), B, scratch_);
    mlp_residual(w, shape_, x_.data(), B, scratch_);
  }
  kernels::rmsnorm(x_.data(), final_norm_.data(), x_.data(), B, H, shape_.eps);
  lm_head_.forward(x_.data(), B, base_logits);
}

void Drafter::draft_blocks(const std::vector<DrafterState*>& states, const int32_t* anchors,
                           const int32_t* anchor_pos, float* base_logits) {
  const int n = int(states.size());
  if (n == 0) return;
  const int B = config_.block_size, H = config_.hidden_size, Q = shape_.q_dim(), KV = shape_.kv_dim();
  const int rows = n * B;
  std::vector<int32_t> tokens(rows, config_.mask_token_id), positions(rows);  // [n * B]
  for (int s = 0; s < n; ++s) {
    TS_CHECK(states[s], "draft_blocks: null state ", s);
    tokens[size_t(s) * B] = anchors[s];
    for (int i = 0; i < B; ++i) positions[size_t(s) * B + i] = anchor_pos[s] + i;
  }
  x_.resize(size_t(rows) * H);
  q_.resize(size_t(rows) * Q);
  attn_.resize(size_t(rows) * Q);
  embed(tokens.data(), rows, x_.data());
  std::vector<float> k_rows(size_t(rows) * KV), v_rows(size_t(rows) * KV);  // [n * B, kv_dim]
  std::vector<uint8_t> all_visible(size_t(B) * B, 1);                       // [B, B]: no mask within a block
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    scratch_.h.resize(size_t(rows) * H);
    kernels::rmsnorm(x_.data(), w.input_norm.data(), scratch_.h.data(), rows, H, shape_.eps);
    project_qkv(w, shape_, scratch_.h.data(), positions.data(), rows, scratch_, q_.data(), k_rows.data(),
                v_rows.data());
    for (int s = 0; s < n; ++s) {  // each block attends to its own context plus itself, as pending rows
      KVCache& cache = states[s]->context;
      cache.begin_append(B);
      const size_t at = size_t(cache.length()) * KV;
      std::memcpy(cache.keys(l) + at, &k_rows[size_t(s) * B * KV], sizeof(float) * B * KV);
      std::memcpy(cache.values(l) + at, &v_rows[size_t(s) * B * KV], sizeof(float) * B * KV);
      cached_attention(shape_, cache, l, &q_[size_t(s) * B * Q], B, all_visible.data(), B, mask_,
                       &attn_[size_t(s) * B * Q]);
      cache.drop_pending();
    }
    attn_out_residual(w, shape_, attn_.data(), x_.data(), rows, scratch_);
    mlp_residual(w, shape_, x_.data(), rows, scratch_);
  }
  kernels::rmsnorm(x_.data(), final_norm_.data(), x_.data(), rows, H, shape_.eps);
  lm_head_.forward(x_.data(), rows, base_logits);
}

void Drafter::add_markov_bias(int32_t parent, float* logits) const {
  const int V = config_.vocab_size, R = config_.markov_rank;
  TS_CHECK(parent >= 0 && parent < V, "drafter: parent token ", parent, " out of range");
  bias_.resize(V);
  markov_w2_.forward(&markov_w1_[size_t(parent) * R], 1, bias_.data());
  for (int v = 0; v < V; ++v) logits[v] += bias_[v];
}

}  // namespace ts
