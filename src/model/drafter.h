// The DSpark block drafter: a few transformer layers that attend, without a causal mask, to the projected target
// hidden states of the committed context plus one block [anchor, mask, ..., mask]. One forward gives base logits
// U[k] for every block position k (the token k+1 places after the anchor); a low-rank Markov head adds
// W2 * W1[parent] to condition a position on the token before it.
//
// This file knows the drafter's arithmetic only; how its outputs become draft trees lives in spec/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/layer.h"

namespace ts {

// Per-sequence drafter state: the context keys/values of every drafter layer, extended each round.
struct DrafterState {
  KVCache context;  // committed rows = context tokens (every committed token except the anchor)
};

class Drafter {
 public:
  static std::unique_ptr<Drafter> load(const std::string& dir);

  const DrafterConfig& config() const { return config_; }
  int block_size() const { return config_.block_size; }
  int vocab_size() const { return config_.vocab_size; }
  // Width of one context row: taps concatenated, len(target_layer_ids) * target_hidden_size.
  int tap_width() const { return int(config_.target_layer_ids.size()) * config_.target_hidden_size; }

  DrafterState new_state(int max_tokens) const;

  // Appends n context rows. taps: [n, tap_width] (the target's layer outputs at target_layer_ids, concatenated),
  // positions: [n] (the tokens' positions). Projects each through fc + hidden_norm, then every layer's k/v.
  void extend_context(DrafterState& state, const float* taps, const int32_t* positions, int n);

  // One forward over [anchor, mask x (block_size-1)] at positions anchor_pos.. -> base logits U: [block_size, vocab].
  // The context is unchanged.
  void draft_block(DrafterState& state, int32_t anchor, int32_t anchor_pos, float* base_logits);

  // Batched draft_block: ONE forward over n blocks, block i = [anchors[i], mask x (block_size-1)] at positions
  // anchor_pos[i].., attending to states[i]'s context and to itself only. base_logits: [n, block_size, vocab].
  // Block i's logits equal draft_block(*states[i], anchors[i], anchor_pos[i]) (every kernel is row-wise
  // batch-invariant). The contexts are unchanged.
  void draft_blocks(const std::vector<DrafterState*>& states, const int32_t* anchors, const int32_t* anchor_pos,
                    float* base_logits);

  // logits: [vocab] += W2 * W1[parent]
  void add_markov_bias(int32_t parent, float* logits) const;

 private:
  Drafter() = default;
  void embed(const int32_t* tokens, int n, float* x) const;

  DrafterConfig config_;
  LayerShape shape_;
  std::unique_ptr<io::Checkpoint> ckpt_;
  const io::TensorRef* embed_table_ = nullptr;  // [vocab, hidden]
  kernels::Linear fc_;                          // [hidden, tap_width]
  std::vector<float> hidden_norm_;              // [hidden]
  std::vector<LayerWeights> layers_;
  std::vector<float> final_norm_;  // [hidden]
  kernels::Linear lm_head_;        // [vocab, hidden]
  std::vector<float> markov_w1_;   // [vocab, rank]
  kernels::Linear markov_w2_;      // [vocab, rank]: bias = W2 * W1[parent]

  LayerScratch scratch_;
  std::vector<float> ctx_, x_, q_, attn_;  // [rows, width] scratch
  mutable std::vector<float> bias_;         // [vocab] Markov bias scratch
  std::vector<uint8_t> mask_;
};

}  // namespace ts
