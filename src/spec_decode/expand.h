// Tree expansion: grow one round's draft tree best-first by (calibrated) path survival.
//
// Every node that may still get children owns a slot in a max-heap. A slot's key is its next child's survival as
// known before the draw: greedy, S_parent * p_hat(largest q among the parent's not-yet-drawn tokens), exactly
// the child it will get; sampling, S_parent * E[p_hat(q(x))] over x drawn from the parent's remaining q (what the
// draw is worth on average; p_hat of the largest remaining q overrated later siblings, whose mass is spread thin:
// at T = 1 on the shipped pair the adaptive tree then accepted 0.995 tokens per round against 1.218 now). Each
// step pops the best slot; if its key is below theta, or no number of nodes worth it would pay for their verification
// (the load-adaptive rule: node_pays_ahead with the round's RoundCost), or node_cap nodes exist, expansion stops.
// Otherwise the draw is admitted BEFORE it is made, then made:
//   greedy (temperature 0): the child is the largest remaining q (so its survival equals the bound: best-first);
//   sampling (temperature T > 0): the child is drawn from q_j = softmax(logits / T) without the parent's earlier
//     children, through the Chooser. Admission never reads the value of the draw it admits
//     (docs/verification.md, rule 1); the child's own survival S_parent * p_hat(q(child)) only ranks its
//     own future children (so a sampled node's survival may be below theta).
// The child gets its own slot (unless at block_size) and the parent's slot is re-pushed with its next bound
// (until branch_cap children or no remaining mass).
//
// Priority per mode: Tree and Chain use the calibrated p_hat; LogQ uses p_hat = q (uncalibrated); Marginal uses
// p_hat = q_marg = softmax(U[d-1]) and also draws from it (as DDTree ranks on block drafters). Chain ignores
// theta, node_cap and the cost model: branch_cap 1 and draft_len nodes (fewer only at block_size).
//
// Cost: a node's q is computed (one conditional_logits call + a vectorised float softmax) only when its slot
// reaches the top of the heap, so the last nodes of a full tree cost nothing. One pass picks its top branch_cap
// tokens (no vocabulary sort); they bound the largest remaining q after any j < branch_cap draws. Greedy keeps only
// that list; sampling also keeps one float [vocab] copy of q per open parent (drawn tokens zeroed in place, the
// chooser draws from it directly, summing it in double), recycled when the parent closes. Marginal q is computed
// once per depth. The work space is kept per thread between calls: a warm round allocates only the tree.
#pragma once

#include <cstdint>
#include <functional>

#include "sampling/chooser.h"
#include "spec_decode/calibration.h"
#include "spec_decode/decode_mode.h"
#include "spec_decode/draft_source.h"
#include "spec_decode/draft_tree.h"

namespace ts::spec_decode {

// The price of one round, for load-adaptive expansion: ms of a round that verifies k tokens per sequence (anchor
// included), non-decreasing in k. The engine builds it from its measured cost curve, the live batch and the
// request's context (engine/cost_model.h, round_cost_ms); expansion reads nothing else about the machine.
// Empty: no pricing (theta and node_cap alone stop the tree).
using RoundCost = std::function<double(int k)>;

// The round-level stop rule of tree expansion. A tree of k tokens (anchor included) that emits expected_tokens
// in expectation is about to admit a node whose survival is next_survival (known before its draw). True iff some
// m in 1..max_more nodes, each worth next_survival, give at least the current rate:
//   (expected_tokens + m * next_survival) / C(k + m) >= expected_tokens / C(k),   C = round_cost.
// m = 1 is the marginal threshold (engine/cost_model.h, adaptive_theta); larger m cross a step of the cost curve
// (L is a staircase set by the GEMM tiles) when the nodes after it are nearly free. Best-first bounds pushed later
// are no higher than the one popped (children are worth at most their parent), except where a later sibling's rank
// offset exceeds an earlier one's, so next_survival bounds the later nodes and a false answer is final but for
// that case.
bool node_pays_ahead(const RoundCost& round_cost, int k, double expected_tokens, double next_survival,
                     int max_more);


// A request's tree shape: plain data the request owns (RequestOptions::tree).
struct TreeShape {
  double theta = 0.1;   // stop when the best slot's survival bound < theta (not in Chain)
  int node_cap = 16;    // max nodes excluding the root (not in Chain)
  int branch_cap = 4;   // max children per node (Chain: 1)
  int draft_len = 4;    // Chain: number of nodes
};

// Everything expansion reads besides the draft source: the shape, the mode (not None) and what the request's
// sampling implies for drafting (the engine fills these from RequestOptions: tree_params_for in engine.cc).
struct TreeParams : TreeShape {
  DecodeMode mode = DecodeMode::Tree;
  float temperature = 0;  // draft temperature = the request's; 0 = greedy (deterministic top-q children)
  DraftFilter filter;     // sampling: the request's top-k / top-p / min-p, applied to q too (draft_source.h)
};

// Throws ts::Error on out-of-range parameters (negative caps, theta < 0, mode None, ...).
void validate_tree_params(const TreeParams& params);

// anchor: the last committed token (the root). round_cost: the round's price (above); with it a slot above theta
// is admitted only while node_pays_ahead(round_cost, 1 + nodes, 1 + sum of survivals, its bound, nodes left under
// node_cap) holds, and a greedy tree, being deterministic, is then cut to the prefix of its admission order with
// the best expected tokens per ms. Chain ignores it. Throws ts::Error on bad params or a DraftSource without the
// function the mode needs.
DraftTree expand(const DraftSource& source, int32_t anchor, const TreeParams& params, const Calibration& calibration,
                 Chooser& chooser, const RoundCost& round_cost = {});

}  // namespace ts::spec_decode
