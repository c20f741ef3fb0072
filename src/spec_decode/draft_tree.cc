#include "spec_decode/draft_tree.h"

#include "core/error.h"

namespace ts::spec_decode {

int DraftTree::add(int32_t node_token, int32_t parent_node, int32_t rank, double q, float path_survival) {
  token.push_back(node_token);
  parent.push_back(parent_node);
  depth.push_back(parent_node < 0 ? 0 : depth[parent_node] + 1);
  sibling_rank.push_back(rank);
  survival.push_back(path_survival);
  draft_q.push_back(q);
  return size() - 1;
}

std::vector<uint8_t> DraftTree::ancestor_mask() const {
  const int n = size();
  std::vector<uint8_t> visible(static_cast<size_t>(n) * n, 0);  // [n, n]
  for (int i = 0; i < n; ++i) {
    for (int j = i; j >= 0; j = parent[j]) visible[static_cast<size_t>(i) * n + j] = 1;
  }
  return visible;
}

std::vector<int32_t> DraftTree::children(int node) const {
  std::vector<int32_t> kids;
  for (int i = node + 1; i < size(); ++i) {
    if (parent[i] == node) kids.push_back(i);  // storage order is draw order
  }
  return kids;
}

void DraftTree::validate(int vocab) const {
  const size_t n = token.size();
  TS_CHECK(n >= 1, "draft tree: expected at least the root node, got an empty tree");
  TS_CHECK(parent.size() == n && depth.size() == n && sibling_rank.size() == n && survival.size() == n &&
               draft_q.size() == n,
           "draft tree: arrays must all have ", n, " entries (token), got parent ", parent.size(), ", depth ",
           depth.size(), ", sibling_rank ", sibling_rank.size(), ", survival ", survival.size(), ", draft_q ",
           draft_q.size());
  TS_CHECK(parent[0] == -1 && depth[0] == 0, "draft tree: node 0 must be the root (parent -1, depth 0), got parent ",
           parent[0], " depth ", depth[0]);
  std::vector<int32_t> child_count(n, 0);
  for (size_t i = 0; i < n; ++i) {
    TS_CHECK(token[i] >= 0 && token[i] < vocab, "draft tree: node ", i, " token ", token[i], " outside [0, ", vocab,
             ")");
    if (i == 0) continue;
    TS_CHECK(parent[i] >= 0 && static_cast<size_t>(parent[i]) < i, "draft tree: node ", i, " has parent ", parent[i],
             ", expected an earlier node");
    TS_CHECK(depth[i] == depth[parent[i]] + 1, "draft tree: node ", i, " depth ", depth[i], ", expected ",
             depth[parent[i]] + 1);
    TS_CHECK(sibling_rank[i] == child_count[parent[i]]++, "draft tree: node ", i, " sibling rank ", sibling_rank[i],
             ", expected ", child_count[parent[i]] - 1, " (siblings stored in draw order)");
  }
}

}  // namespace ts::spec_decode
