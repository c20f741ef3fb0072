// Lossless verification of a draft tree against the target's logits (docs/verification.md).
//
// Greedy (target temperature 0): from the root, follow the child whose token is argmax of the node's raw target
// logits; the bonus is that argmax at the last accepted node.
// Sampling (temperature > 0): at each node on the walk, p = processed_distribution(row) (temperature, top-k,
// top-p, min-p). The node's children c_1..c_m (draw order) are tested in turn: c_j, drawn from q_j = q without
// c_1..c_{j-1} renormalised, is accepted with probability min(1, p(c_j) / q_j(c_j)); on acceptance the walk
// descends into c_j with that node's p; on rejection p <- normalise(max(p - q_j, 0)). When every child is rejected
// or the node is a leaf, the bonus token is drawn from the current p. q is recomputed here from the DraftSource,
// the parent token, the tree's q_source and draft temperature and the draw order, by the same code expand() used.
// A tree drawn greedily (draft temperature 0) has deterministic children: q_j is the point mass on c_j, which is
// exact too (accept with probability p(c_j); the residual is p without c_j).
// Degenerate residual: max(p - q_j, 0) can be all zero only if p == q_j, when the rejection had probability 0;
// rounding can still reach it, and then p is left as it was (documented guard, no NaN).
// Every coin (only when 0 < acceptance < 1) and the bonus draw go through the Chooser.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/chooser.h"
#include "sampling/sampling_params.h"
#include "spec_decode/calibration.h"
#include "spec_decode/draft_source.h"
#include "spec_decode/draft_tree.h"

namespace ts::spec_decode {

struct VerifyResult {
  std::vector<int32_t> accepted_nodes;  // tree nodes on the accepted path, root excluded, in depth order
  std::vector<int32_t> emitted;         // their tokens, then the bonus token
  int32_t bonus_token = -1;
  int32_t last_node = 0;                // deepest accepted node (0 = root): the bonus came from its row
  // Calibration labels: one per child of each node on the accepted path (calibration.h explains the rule).
  std::vector<EdgeRecord> edges;
};

// target_logits: [tree.size(), vocab], row i = the target's logits at node i (predicting node i's children).
// Throws ts::Error when the tree is malformed or its sizes disagree with source.
VerifyResult verify(const DraftTree& tree, const float* target_logits, const SamplingParams& target_params,
                    const DraftSource& source, Chooser& chooser);

}  // namespace ts::spec_decode
