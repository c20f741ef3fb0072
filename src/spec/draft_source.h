// How tree expansion and verification read the drafter's distribution q, and the one place q is computed.
//
// Losslessness needs the verifier's q to be bit-for-bit the distribution each draft token was drawn from
// (lossless-verification.md, pitfall 2), so expansion and verification both go through draft_distribution() and
// remove_drawn(): same inputs, same arithmetic, same doubles.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace ts::spec {

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

// q for the children of a node at depth child_depth - 1 whose token is parent_token:
//   q = softmax(logits / temperature), temperature 0 meaning 1 (greedy drafting ranks by q at temperature 1 and
//   draws deterministically), computed by softmax_f32 and widened to double (q sums to 1 within float rounding;
//   every draw renormalises through remove_drawn). logits_scratch: [vocab] work space; q: resized to [vocab].
void draft_distribution(const DraftSource& source, QSource q_source, int child_depth, int32_t parent_token,
                        float temperature, std::vector<float>* logits_scratch, std::vector<double>* q);

// q_j: q with the already drawn tokens removed and the rest renormalised (the distribution of the next draw
// without replacement). Returns the remaining mass Z (q_j = q / Z off the drawn set); when Z == 0 q_j is all 0.
// q: [vocab]; drawn: distinct tokens; q_j: resized to [vocab].
// The same q in float, without the double copy: probs: [vocab] (expansion ranks and bounds from these; its draws
// and verify() use the double widening of exactly these values).
void draft_probs_f32(const DraftSource& source, QSource q_source, int child_depth, int32_t parent_token,
                     float temperature, float* probs);

double remove_drawn(const std::vector<double>& q, std::span<const int32_t> drawn, std::vector<double>* q_j);

}  // namespace ts::spec
