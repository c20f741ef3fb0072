// One speculative round of one request, in one place: the drafted block in, the verified tokens out.
//
//   Round round(block);                                      the drafter's block for this round (DraftedBlock)
//   round.draft(anchor, params, calibration, chooser, cost)  grow the tree best-first (expand.h)
//   round.tree()                                             what the target verifies: token[i] at position
//                                                            anchor position + depth[i], seeing ancestor_mask()
//   RoundOutcome out = round.finish(rows, sampling, chooser) verify (verify.h) the target's rows of the tree
//
// The caller runs the two model forwards and applies the outcome to the model state: it keeps the KV rows of
// out.kept_nodes (KVCache::commit), extends the drafter's context with the target's taps at those rows, and emits
// out.emitted in order. The method never sees a model: it reads logits and returns tokens and tree rows. The engine
// (engine/engine_run.cc) and `bench round` drive rounds through this type.
//
// What verification reads: the target's rows [tree size, vocab], row i the logits after node i's path, already
// edited for the request (logit_bias, min_tokens, penalties: the row of a node at depth d predicts generated token
// number generated + d); the request's SamplingParams; and q recomputed from the same DraftedBlock the tree was
// drawn from (draft_source.h). The rules it keeps are docs/verification.md's.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sampling/chooser.h"
#include "sampling/sampling_params.h"
#include "spec_decode/calibration.h"
#include "spec_decode/draft_source.h"
#include "spec_decode/draft_tree.h"
#include "spec_decode/expand.h"
#include "spec_decode/verify.h"

namespace ts::spec_decode {

// The drafter's output for one round and the request's edits on q.
struct DraftedBlock {
  int vocab = 0;
  int block_size = 0;                  // the deepest a node can be
  const float* base_logits = nullptr;  // [block_size, vocab]: U[d-1] at row d-1; must outlive the round
  // Adds the Markov head's W2 * W1[parent] to a child's logits ([vocab], in place); empty: no Markov head.
  std::function<void(int32_t parent, float* logits)> add_markov_bias;
  // The request's edits on q for a child at depth d ([vocab], in place, after the Markov bias); empty: none. Any
  // edit is lossless as long as expansion and verification read the same q, which the round guarantees.
  std::function<void(int depth, float* logits)> edit;
};

struct RoundOutcome {
  // The rows the caller keeps: the root (the anchor, row 0) then the accepted nodes, root to leaf.
  std::vector<int32_t> kept_nodes;   // [1 + accepted]
  std::vector<int32_t> kept_depths;  // [1 + accepted]: position = anchor position + depth
  // The tokens to emit, in order: the accepted draft tokens, then the bonus token. row: the tree node whose target
  // row the token was chosen from (its parent), for logprobs.
  struct Emitted {
    int32_t token;
    int32_t row;
  };
  std::vector<Emitted> emitted;  // [accepted + 1]
  int draft_nodes = 0;           // tree nodes besides the root
  int accepted = 0;              // accepted draft tokens
  double predicted = 0;          // sum of the nodes' survivals: the accepted tokens the tree expected
  std::vector<EdgeRecord> edges;  // calibration labels (calibration.h)
};

class Round {
 public:
  explicit Round(DraftedBlock block);
  Round(const Round&) = delete;  // q reads the block through `this`
  Round& operator=(const Round&) = delete;

  // Grows this round's tree from the anchor (the last emitted token). round_cost: the load-adaptive price
  // (expand.h; empty: unpriced). Throws ts::Error on bad parameters.
  void draft(int32_t anchor, const TreeParams& params, const Calibration& calibration, Chooser& chooser,
             const RoundCost& round_cost = {});
  const DraftTree& tree() const { return tree_; }

  // target_rows: [tree().size(), vocab] as described above. Call once, after draft().
  RoundOutcome finish(const float* target_rows, const SamplingParams& sampling, Chooser& chooser) const;

 private:
  DraftedBlock block_;
  DraftSource source_;  // q as expansion and verification both read it
  DraftTree tree_;
};

}  // namespace ts::spec_decode
