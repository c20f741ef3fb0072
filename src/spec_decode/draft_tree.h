// A draft tree: plain data, built once per round by expand(), read by the target forward (tokens, depths, mask)
// and by verify().
#pragma once

#include <cstdint>
#include <vector>

#include "spec_decode/draft_source.h"

namespace ts::spec_decode {

// Node 0 is the root = the anchor (the last committed token). Parents always precede their children, and siblings
// are stored in draw order.
struct DraftTree {
  std::vector<int32_t> token;         // [n]
  std::vector<int32_t> parent;        // [n], -1 for the root
  std::vector<int32_t> depth;         // [n], root 0 (position = anchor position + depth)
  std::vector<int32_t> sibling_rank;  // [n], order in which the node was drawn among its siblings (0-based)
  std::vector<float> survival;        // [n], calibrated path survival (root 1)
  std::vector<double> draft_q;        // [n], q(token | parent) the node was drawn with, before removal (root 1)

  // How the tokens were drawn; verify() rebuilds each q_j from these.
  QSource q_source = QSource::Conditional;
  float draft_temperature = 0;  // 0: deterministic (top-q) children; > 0: sampled without replacement
  DraftFilter draft_filter;     // sampled children: the top-k / top-p / min-p applied to q (draft_source.h)

  int size() const { return static_cast<int>(token.size()); }
  // Appends a node; returns its index.
  int add(int32_t node_token, int32_t parent_node, int32_t rank, double q, float path_survival);
  // visible[i * n + j] = 1 iff j is i or an ancestor of i.  [n, n]
  std::vector<uint8_t> ancestor_mask() const;
  // Children of node, in draw order.
  std::vector<int32_t> children(int node) const;
  // Throws ts::Error unless the arrays agree in size, node 0 is the only root, parents precede children, depths
  // are parent + 1, tokens are in [0, vocab) and sibling ranks are 0, 1, 2, ... per parent in storage order.
  void validate(int vocab) const;
};

}  // namespace ts::spec_decode
