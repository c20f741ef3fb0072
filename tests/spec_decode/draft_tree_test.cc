#include <gtest/gtest.h>

#include "core/error.h"
#include "spec_decode/draft_tree.h"

namespace ts::spec_decode {
namespace {

// Node (parent): 0 (-), 1 (0), 2 (0), 3 (1), 4 (1), 5 (2).
DraftTree sample_tree() {
  DraftTree t;
  t.add(9, -1, 0, 1, 1);
  t.add(1, 0, 0, 0.6, 0.6f);
  t.add(2, 0, 1, 0.3, 0.3f);
  t.add(3, 1, 0, 0.5, 0.3f);
  t.add(4, 1, 1, 0.2, 0.12f);
  t.add(5, 2, 0, 0.9, 0.27f);
  return t;
}

TEST(DraftTree, DepthsChildrenAndMask) {
  const DraftTree t = sample_tree();
  EXPECT_EQ(t.size(), 6);
  EXPECT_EQ(t.depth, (std::vector<int32_t>{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(t.children(0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(t.children(1), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(t.children(5), (std::vector<int32_t>{}));
  const std::vector<uint8_t> mask = t.ancestor_mask();
  const std::vector<std::vector<int>> want = {{1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {1, 0, 1, 0, 0, 0},
                                              {1, 1, 0, 1, 0, 0}, {1, 1, 0, 0, 1, 0}, {1, 0, 1, 0, 0, 1}};
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(mask[i * 6 + j], want[i][j]) << i << "," << j;
  }
  EXPECT_NO_THROW(t.validate(10));
}

TEST(DraftTree, ValidateCatchesMalformedTrees) {
  EXPECT_THROW(DraftTree{}.validate(10), Error);
  DraftTree t = sample_tree();
  EXPECT_THROW(t.validate(5), Error);  // token 9 outside the vocabulary
  t = sample_tree();
  t.parent[3] = 4;  // a parent after its child
  EXPECT_THROW(t.validate(10), Error);
  t = sample_tree();
  t.depth[5] = 1;
  EXPECT_THROW(t.validate(10), Error);
  t = sample_tree();
  t.sibling_rank[4] = 0;  // two first-drawn siblings
  EXPECT_THROW(t.validate(10), Error);
  t = sample_tree();
  t.survival.pop_back();
  EXPECT_THROW(t.validate(10), Error);
}

}  // namespace
}  // namespace ts::spec_decode
