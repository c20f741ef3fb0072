// How tree expansion and verification read the drafter's distribution q, and the one place q is computed.
//
// Losslessness needs the verifier's q to be bit-for-bit the distribution each draft token was drawn from
// (docs/verification.md, rule 2), so expansion and verification both compute q with draft_probs_f32() (same
// inputs, same arithmetic, same floats), and both normalise the without-replacement q_j by draw_total()
// (sampling/chooser.h) of q with the drawn tokens zeroed: expansion's chooser draws token t with probability
// q(t) / draw_total, and verify() divides by that same double.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ts::spec_decode {

// Plain function objects, filled by the drafter once per round. Both must be deterministic within the round:
// verify() calls conditional_logits again for the nodes on the accepted path and needs the very values expand()
// drew from (a different reduction order or thread split would make the verifier's q differ from the draw's).
struct DraftSource {
  int vocab = 0;
  int block_size = 0;  // max tree depth
  // Conditional logits of a child at depth d (1..block_size) whose parent token is t: U[d-1] + W2 * W1[t].
  // out: [vocab]
  std::function<void(int depth, int32_t parent_token, float* out)> conditional_logits;
  // Base (marginal) logits U[d-1], for the marginal-ranked baseline. out: [vocab]
  std::function<void(int depth, float* out)> base_logits;
};

// Which logits a tree's tokens were drawn from.
enum class QSource : uint8_t {
  Conditional,  // Markov conditional on the actual parent token (TreeSpark, chain, log-q trees)
  Base,         // per-depth base logits U[d-1], ignoring the parent (marginal-ranked baseline)
};

// The request's top-k / top-p / min-p, applied to q too when children are sampled (as vLLM samples its draft
// models with the request's parameters). Any q keeps rejection sampling exact; one closer to the target's
// processed p is accepted more often: a draw outside the target's top-k or nucleus is always rejected.
struct DraftFilter {
  int top_k = 0;      // 0 = off
  float top_p = 1;    // 1 = off
  float min_p = 0;    // 0 = off
  bool active() const { return top_k > 0 || top_p < 1 || min_p > 0; }
};

// In place on probs ([vocab], a normalised float distribution), in the target's order (sampling/distribution.h):
// top-k keeps every token >= the k-th largest value (ties with it survive), top-p the smallest prefix in
// (q desc, index asc) order whose mass reaches top_p of what is left, min-p every token >= min_p x the largest;
// the rest become 0 and the survivors are renormalised. Deterministic: the same floats in give the same floats out.
void apply_draft_filter(const DraftFilter& filter, int vocab, float* probs);

// q for the children of a node at depth child_depth - 1 whose token is parent_token:
//   q = softmax(logits / temperature), temperature 0 meaning 1 (greedy drafting ranks by q at temperature 1 and
//   draws deterministically), computed in float by softmax_f32 in place. probs: [vocab] (the conditional or base
//   logits are written there first). Expansion ranks, bounds and draws from these floats; verify() recomputes
//   them for the nodes on the accepted path, and widens them to double (exactly) for its ratios. With
//   temperature > 0, then filtered by `filter` (apply_draft_filter); greedy drafting ignores it.
void draft_probs_f32(const DraftSource& source, QSource q_source, int child_depth, int32_t parent_token,
                     float temperature, float* probs, const DraftFilter& filter = {});

}  // namespace ts::spec_decode
