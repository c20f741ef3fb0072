// The DSpark block drafter: a few transformer layers that attend, without a causal mask, to the projected target
// hidden states of the committed context plus one block [anchor, mask, ..., mask]. One forward gives base logits
// U[k] for every block position k (the token k+1 places after the anchor); a low-rank Markov head adds
// W2 * W1[parent] to condition a position on the token before it.
//
// This file knows the drafter's arithmetic only; how its outputs become draft trees lives in spec_decode/.
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
#include "model/weight_plan.h"

namespace ts {

// Per-sequence drafter state: the context keys/values of every drafter layer, extended each round.
struct DrafterState {
  KVCache context;  // committed rows = context tokens (every committed token except the anchor)
};

// The one check that a drafter fits a target: equal vocabularies, tap layers inside the target, and
// target_hidden_size (when set) equal to the target's hidden size. Throws ts::Error prefixed with `source`.
// Drafter::load runs it, and so do Engine and Generator for a drafter built otherwise.
void check_pair(const DrafterConfig& drafter, const ModelConfig& target, const std::string& source);

class Drafter {
 public:
  // Loads the drafter for the target it is paired with: the tap width is len(target_layer_ids) * the target's
  // hidden size, checked against fc.weight (and the optional target_hidden_size key); vocabularies and tap layers
  // must fit the target. Throws ts::Error naming what disagrees.
  // weights: the projections' and lm_head's format (model/weight_plan.h; `--drafter-quantize`), quantized at load
  // like a target's; norms, the embedding table and the Markov head stay as stored. Any format keeps speculation
  // lossless (any q is exact); a coarser one only changes how often drafts are accepted.
  static std::unique_ptr<Drafter> load(const std::string& dir, const ModelConfig& target,
                                       WeightScheme weights = WeightScheme::Native);
  // "native" or the scheme's name (part of the cost cache's key: the drafter's cost F(b) depends on it).
  std::string weight_format() const { return weight_scheme_name(weights_); }

  const DrafterConfig& config() const { return config_; }
  int block_size() const { return config_.block_size; }
  int vocab_size() const { return config_.vocab_size; }
  // False for a drafter without a Markov head (markov_rank 0): conditionals are then the base logits, so
  // priorities built on parent-conditional q (TreeSpark's calibrated / logq trees) have nothing to rank by.
  bool has_markov_head() const { return config_.markov_rank > 0; }
  // Width of one context row: taps concatenated, len(target_layer_ids) * the target's hidden size.
  int tap_width() const { return int(config_.target_layer_ids.size()) * config_.target_hidden_size; }

  DrafterState new_state(int max_tokens) const;
  // Element type of the context caches new_state makes: BF16 for a bf16 drafter, F32 otherwise, unless set.
  DType kv_dtype() const { return kv_dtype_; }
  void set_kv_dtype(DType dtype);

  // Appends n context rows. taps: [n, tap_width] (the target's layer outputs at target_layer_ids, concatenated),
  // positions: [n] (the tokens' positions). Projects each through fc + hidden_norm, then every layer's k/v.
  void extend_context(DrafterState& state, const float* taps, const int32_t* positions, int n);

  // One forward over [anchor, mask x (block_size-1)] at positions anchor_pos.. -> base logits U: [block_size, vocab].
  // The context is unchanged. draft_blocks with one state.
  void draft_block(DrafterState& state, int32_t anchor, int32_t anchor_pos, float* base_logits);

  // Batched draft_block: ONE forward over n blocks, block i = [anchors[i], mask x (block_size-1)] at positions
  // anchor_pos[i].., attending to states[i]'s context and to itself only. base_logits: [n, block_size, vocab].
  // Block i's logits do not depend on the other blocks (every kernel is row-wise batch-invariant: engine_test
  // checks n blocks against one at a time). The contexts are unchanged.
  void draft_blocks(const std::vector<DrafterState*>& states, const int32_t* anchors, const int32_t* anchor_pos,
                    float* base_logits);

  // logits: [vocab] += W2 * W1[parent]; unchanged without a Markov head. The bias depends only on the parent
  // token, so rows are memoised (see markov_bias_row): equal tokens give bit-identical logits whether the row was
  // computed or remembered.
  void add_markov_bias(int32_t parent, float* logits) const;
  // Markov bias rows computed / served from the memo so far (for benchmarks).
  long markov_rows_computed() const { return memo_misses_; }
  long markov_rows_remembered() const { return memo_hits_; }

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
  DType kv_dtype_ = DType::F32;
  WeightScheme weights_ = WeightScheme::Native;
  std::vector<float> markov_w1_;   // [vocab, rank], empty without a Markov head
  kernels::Linear markov_w2_;      // [vocab, rank]: bias = W2 * W1[parent]; unset without a Markov head

  LayerScratch scratch_;
  std::vector<float> ctx_, x_, q_, attn_;  // [rows, width] scratch
  // Markov bias memo: W2 * W1[t] for recently used tokens t, least recently used row evicted. A tree round loads
  // one conditional per expanded node and the walk reloads the accepted path's; parents repeat within a round
  // and across rounds (the anchor and accepted tokens were parents in the round before), and a row costs a
  // [vocab, rank] f32 GEMV (1 MiB for the shipped drafter) against a 16 KiB read when remembered.
  const float* markov_bias_row(int32_t token) const;
  // [memo rows, vocab], not zero-filled: a row is written before it is read, so only the rows in use are ever
  // touched (zero-filling it faulted in every page of it inside a fresh process's first round).
  mutable std::unique_ptr<float[]> memo_rows_;
  mutable std::vector<int32_t> memo_token_;     // [memo rows] token held by each row, -1 = free
  mutable std::vector<uint64_t> memo_used_;     // [memo rows] last use (LRU stamp)
  mutable std::vector<int32_t> memo_slot_;      // [vocab] row holding token t, -1 = none
  mutable uint64_t memo_clock_ = 0;
  mutable long memo_hits_ = 0, memo_misses_ = 0;
  std::vector<std::vector<uint8_t>> block_masks_;       // [n][block, context_n + block] attention masks
  std::vector<int32_t> block_tokens_, block_positions_;  // [n * block]
  std::vector<float> block_kv_;                          // [2, rows, kv_dim] one layer's k/v rows (block or context)
  std::vector<DrafterState*> block_states_;              // [1]: draft_block's one state
};

}  // namespace ts
