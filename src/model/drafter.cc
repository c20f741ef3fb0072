#include "model/drafter.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/rope.h"
#include "model/target_model.h"

namespace ts {

void check_pair(const DrafterConfig& c, const ModelConfig& target, const std::string& source) {
  TS_CHECK(c.vocab_size == target.vocab_size, source, ": drafter vocab_size ", c.vocab_size,
           " != the target's vocab_size ", target.vocab_size);
  for (int32_t l : c.target_layer_ids)
    TS_CHECK(l >= 0 && l < target.num_layers, source, ": target_layer_ids has layer ", l, " but the target has ",
             target.num_layers, " layers");
  TS_CHECK(c.target_hidden_size == 0 || c.target_hidden_size == target.hidden_size, source, ": target_hidden_size ",
           c.target_hidden_size, " disagrees with the target's hidden_size ", target.hidden_size);
}

std::unique_ptr<Drafter> Drafter::load(const std::string& dir, const ModelConfig& target, WeightScheme weights) {
  std::unique_ptr<Drafter> d(new Drafter());
  d->config_ = load_drafter_config(dir);
  DrafterConfig& c = d->config_;
  const std::string source = dir + "/config.json";
  // The tap width comes from the target; the non-public target_hidden_size key is only checked.
  check_pair(c, target, source);
  c.target_hidden_size = target.hidden_size;
  d->ckpt_ = std::make_unique<io::Checkpoint>(dir);
  const io::Checkpoint& ckpt = *d->ckpt_;
  const int H = c.hidden_size, V = c.vocab_size;
  d->shape_ = LayerShape{H, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rms_norm_eps,
                         /*qk_norm=*/true, /*qkv_bias=*/false, /*rope_inv_freq=*/{}, /*rope_attention_scale=*/1.0f};
  RopeTable rope = rope_table(c.rope, c.head_dim);
  d->shape_.rope_inv_freq = std::move(rope.inv_freq);
  d->shape_.rope_attention_scale = rope.attention_scale;
  d->embed_table_ = &ckpt.weight("embed_tokens.weight", {V, H});
  const DType compute = d->embed_table_->dtype == DType::BF16 ? DType::BF16 : DType::F32;
  d->kv_dtype_ = compute;
  const io::TensorRef& fc = ckpt.tensor("fc.weight");
  const std::vector<int64_t> fc_shape{H, d->tap_width()};
  TS_CHECK(fc.shape == fc_shape, dir, ": fc.weight is ", io::shape_to_string(fc.shape), " but ",
           c.target_layer_ids.size(), " taps (target_layer_ids) of the target's hidden size ", target.hidden_size,
           " need ", io::shape_to_string(fc_shape), ": is this drafter paired with the right target?");
  d->weights_ = weights;
  WeightPlan plan;
  plan.compute = compute;
  plan.scheme = weights;
  plan.n_layers = c.num_layers;
  d->fc_ = load_linear(ckpt, {"fc.weight"}, {H}, d->tap_width(), plan, MatrixRole::DrafterFc);
  d->hidden_norm_ = load_vector(ckpt, "hidden_norm.weight", H);
  for (int l = 0; l < c.num_layers; ++l) {
    plan.layer = l;
    d->layers_.push_back(load_layer(ckpt, cat("layers.", l, "."), d->shape_, plan));
  }
  plan.layer = -1;
  d->final_norm_ = load_vector(ckpt, "norm.weight", H);
  d->lm_head_ = load_linear(ckpt, {"lm_head.weight"}, {V}, H, plan, MatrixRole::LmHead);
  const bool has_w1 = ckpt.has("markov_head.markov_w1.weight"), has_w2 = ckpt.has("markov_head.markov_w2.weight");
  if (c.markov_rank == 0) {
    TS_CHECK(!has_w1 && !has_w2, source, ": markov_rank is 0 (or absent) but ", dir,
             " holds markov_head tensors; set markov_rank to their rank");
  } else {
    d->markov_w1_ = io::to_f32(ckpt.weight("markov_head.markov_w1.weight", {V, c.markov_rank}));
    // The Markov bias is part of q: keep it in f32 so the draft distribution is as the reference computes it.
    d->markov_w2_ = load_linear(ckpt, {"markov_head.markov_w2.weight"}, {V}, c.markov_rank, DType::F32);
  }
  // Everything but the embedding rows is copied by now (io::Checkpoint::drop_resident_pages).
  d->ckpt_->drop_resident_pages();
  return d;
}

DrafterState Drafter::new_state(int max_tokens) const {
  return DrafterState{KVCache(config_.num_layers, shape_.kv_heads, shape_.head_dim, max_tokens + config_.block_size,
                              kv_dtype_)};
}

void Drafter::set_kv_dtype(DType dtype) {
  TS_CHECK(dtype == DType::F32 || dtype == DType::BF16, "KV cache dtype must be F32 or BF16, got ", dtype_name(dtype));
  kv_dtype_ = dtype;
}

void Drafter::embed(const int32_t* tokens, int n, float* x) const {
  kernels::embed_rows(embed_table_->data, embed_table_->dtype, config_.vocab_size, config_.hidden_size, tokens, n, x);
}

void Drafter::extend_context(DrafterState& state, const float* taps, const int32_t* positions, int n) {
  if (n == 0) return;
  const int H = config_.hidden_size, KV = shape_.kv_dim();
  ctx_.resize(size_t(n) * H);
  fc_.forward(taps, n, ctx_.data());
  kernels::rmsnorm(ctx_.data(), hidden_norm_.data(), ctx_.data(), n, H, shape_.eps);
  KVCache& cache = state.context;
  cache.begin_append(n);
  block_kv_.resize(2 * size_t(n) * KV);  // [2, n, kv_dim]: this layer's k then v rows
  float* k_rows = block_kv_.data();
  float* v_rows = k_rows + size_t(n) * KV;
  // The context enters every layer's k/v directly (no input norm); it has no queries.
  for (int l = 0; l < config_.num_layers; ++l) {
    project_kv(layers_[l], shape_, ctx_.data(), positions, n, scratch_, k_rows, v_rows);
    cache.write_pending(l, 0, n, k_rows, v_rows);
  }
  cache.commit_all();
}

void Drafter::draft_block(DrafterState& state, int32_t anchor, int32_t anchor_pos, float* base_logits) {
  block_states_.assign(1, &state);
  draft_blocks(block_states_, &anchor, &anchor_pos, base_logits);
}

void Drafter::draft_blocks(const std::vector<DrafterState*>& states, const int32_t* anchors,
                           const int32_t* anchor_pos, float* base_logits) {
  const int n = int(states.size());
  if (n == 0) return;
  const int B = config_.block_size, H = config_.hidden_size, Q = shape_.q_dim(), KV = shape_.kv_dim();
  const int rows = n * B;
  block_tokens_.assign(rows, config_.mask_token_id);  // [n * B]
  block_positions_.resize(rows);                      // [n * B]
  if (block_masks_.size() < size_t(n)) block_masks_.resize(n);
  for (int s = 0; s < n; ++s) {
    TS_CHECK(states[s], "draft_blocks: null state ", s);
    block_tokens_[size_t(s) * B] = anchors[s];
    for (int i = 0; i < B; ++i) block_positions_[size_t(s) * B + i] = anchor_pos[s] + i;
    // Block s sees its whole context and itself without a mask: [B, context + B] ones, the same in every layer.
    block_masks_[s].assign(size_t(B) * (states[s]->context.length() + B), 1);
  }
  x_.resize(size_t(rows) * H);
  q_.resize(size_t(rows) * Q);
  attn_.resize(size_t(rows) * Q);
  block_kv_.resize(2 * size_t(rows) * KV);  // [2, n * B, kv_dim]: this layer's k then v rows of every block
  float* k_rows = block_kv_.data();
  float* v_rows = k_rows + size_t(rows) * KV;
  embed(block_tokens_.data(), rows, x_.data());
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    scratch_.h.resize(size_t(rows) * H);
    kernels::rmsnorm(x_.data(), w.input_norm.data(), scratch_.h.data(), rows, H, shape_.eps);
    project_qkv(w, shape_, scratch_.h.data(), block_positions_.data(), rows, scratch_, q_.data(), k_rows, v_rows);
    for (int s = 0; s < n; ++s) {  // each block attends to its own context plus itself, as pending rows
      KVCache& cache = states[s]->context;
      cache.begin_append(B);
      write_pending_and_attend(shape_, cache, l, k_rows + size_t(s) * B * KV, v_rows + size_t(s) * B * KV,
                               &q_[size_t(s) * B * Q], B, block_masks_[s].data(), &attn_[size_t(s) * B * Q]);
      cache.drop_pending();
    }
    attn_out_residual(w, shape_, attn_.data(), x_.data(), rows, scratch_);
    mlp_residual(w, shape_, x_.data(), rows, scratch_);
  }
  kernels::rmsnorm(x_.data(), final_norm_.data(), x_.data(), rows, H, shape_.eps);
  lm_head_.forward(x_.data(), rows, base_logits);
}

namespace {
// The memo holds about this many bytes of bias rows (256 rows of the shipped 4096-token vocabulary; a handful for
// a 150k vocabulary, where a row is 600 KiB and the GEMV 38 MiB).
constexpr size_t kMarkovMemoBytes = size_t(4) << 20;
constexpr size_t kMarkovMemoMinRows = 8, kMarkovMemoMaxRows = 256;
}  // namespace

const float* Drafter::markov_bias_row(int32_t token) const {
  const int V = config_.vocab_size, R = config_.markov_rank;
  if (memo_slot_.empty()) {  // first use: size the memo
    const size_t rows = std::clamp(kMarkovMemoBytes / (sizeof(float) * size_t(V)), kMarkovMemoMinRows,
                                   kMarkovMemoMaxRows);
    memo_rows_.reset(new float[rows * V]);  // default-initialised: see memo_rows_
    memo_token_.assign(rows, -1);
    memo_used_.assign(rows, 0);
    memo_slot_.assign(V, -1);
  }
  ++memo_clock_;
  int32_t slot = memo_slot_[token];
  if (slot >= 0) {
    ++memo_hits_;
    memo_used_[slot] = memo_clock_;
    return &memo_rows_[size_t(slot) * V];
  }
  ++memo_misses_;
  slot = 0;  // a free row, else the least recently used one
  for (int32_t r = 0; r < int32_t(memo_token_.size()); ++r) {
    if (memo_token_[r] < 0) {
      slot = r;
      break;
    }
    if (memo_used_[r] < memo_used_[slot]) slot = r;
  }
  if (memo_token_[slot] >= 0) memo_slot_[memo_token_[slot]] = -1;
  memo_token_[slot] = token;
  memo_used_[slot] = memo_clock_;
  memo_slot_[token] = slot;
  float* row = &memo_rows_[size_t(slot) * V];  // [vocab]
  markov_w2_.forward(&markov_w1_[size_t(token) * R], 1, row);
  return row;
}

void Drafter::add_markov_bias(int32_t parent, float* logits) const {
  const int V = config_.vocab_size;
  TS_CHECK(parent >= 0 && parent < V, "drafter: parent token ", parent, " out of range");
  if (config_.markov_rank == 0) return;  // no Markov head: the conditional is the base logits
  kernels::add(logits, markov_bias_row(parent), V);
}

}  // namespace ts
