// The prefix cache's block pool alone: chunks are allocated only when a slot of theirs is first written, a request
// reading consecutive slots of one chunk gets one span (two where the run crosses into the next chunk), shared and
// copied rows read back as written, and bad slots throw.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/error.h"
#include "engine/block_pool.h"
#include "engine/prefix_cache.h"

namespace ts {
namespace {

constexpr int kLayers = 2, kHeads = 2, kHeadDim = 8, kDim = kHeads * kHeadDim;

KVCache make(int rows) { return KVCache(kLayers, kHeads, kHeadDim, rows, DType::BF16); }

// A cache of n committed rows of random values.
KVCache filled(int n, std::mt19937& rng) {
  KVCache c = make(n);
  std::normal_distribution<float> normal;
  c.begin_append(n);
  for (int l = 0; l < kLayers; ++l) {
    std::vector<float> k(size_t(n) * kDim), v(k.size());
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    c.write_pending(l, 0, n, k.data(), v.data());
  }
  c.commit_all();
  return c;
}

void expect_same_rows(const KVCache& a, int a_first, const KVCache& b, int b_first, int n) {
  std::vector<float> ka(kDim), va(kDim), kb(kDim), vb(kDim);
  for (int l = 0; l < kLayers; ++l)
    for (int j = 0; j < n; ++j) {
      a.read_row(l, a_first + j, ka.data(), va.data());
      b.read_row(l, b_first + j, kb.data(), vb.data());
      ASSERT_EQ(ka, kb) << "layer " << l << " row " << j;
      ASSERT_EQ(va, vb) << "layer " << l << " row " << j;
    }
}

TEST(BlockPool, ChunksComeWithTheirFirstSlotAndRunsSplitOnlyAtChunkBounds) {
  std::mt19937 rng(3);
  const KVCache source = filled(96, rng);
  BlockPool pool(make, /*block_tokens=*/16, /*slots=*/10, /*chunk_slots=*/4);  // chunks: slots 0-3, 4-7, 8-9
  EXPECT_EQ(pool.chunks_allocated(), 0);
  for (int s = 2; s < 6; ++s) pool.write(s, 16, source, (s - 2) * 16);  // source rows [0, 64) in slots 2..5
  EXPECT_EQ(pool.chunks_allocated(), 2);
  KVCache request = make(200);
  for (int s = 2; s < 6; ++s) pool.share(s, request);
  EXPECT_EQ(request.shared_rows(), 64);
  EXPECT_EQ(request.rows(0).n_spans, 2);  // slots 2-3 and 4-5: one run per chunk
  expect_same_rows(request, 0, source, 0, 64);
  KVCache other = make(100);
  EXPECT_THROW(pool.share(8, other), Error);  // its chunk was never written
  EXPECT_EQ(other.length(), 0);
  // A tail: the first rows of a slot, copied as the request's own rows.
  pool.write(9, 7, source, 64);
  EXPECT_EQ(pool.chunks_allocated(), 3);
  pool.copy(9, 5, request);
  EXPECT_EQ(request.length(), 69);
  EXPECT_EQ(request.shared_rows(), 64);
  expect_same_rows(request, 64, source, 64, 5);

  EXPECT_THROW(pool.share(10, other), Error);  // no such slot
  EXPECT_THROW(pool.write(1, 17, source, 0), Error);  // more rows than a block
  EXPECT_EQ(other.length(), 0);

  // Chunks whose slots all hold nothing are freed (here: every slot of chunk 2 free, the others in use).
  auto free = [](int64_t first, int64_t) { return first == 8; };
  EXPECT_EQ(pool.release_unused(free), 1);
  EXPECT_EQ(pool.chunks_allocated(), 2);
  EXPECT_THROW(pool.copy(9, 5, other), Error);  // gone with its chunk
  expect_same_rows(request, 0, source, 0, 64);  // the shared runs stay
}

// The prefix cache says which slots are free: a chunk's range is free only when one free run covers it.
TEST(BlockPool, PrefixCacheReportsFreeSlotRanges) {
  PrefixCache cache(4, 1, 8);
  EXPECT_TRUE(cache.slots_free(0, 8));
  std::vector<int32_t> t(12);
  for (int i = 0; i < 12; ++i) t[i] = 100 + i;
  cache.store(t.data(), 12, cache.chain(t.data(), 12), 1 << 20, [](int, int, int) {},
              [](int, int, int) { return false; });  // slots 0, 1, 2
  EXPECT_FALSE(cache.slots_free(0, 4));
  EXPECT_FALSE(cache.slots_free(2, 1));
  EXPECT_TRUE(cache.slots_free(3, 5));
  EXPECT_TRUE(cache.slots_free(4, 4));
  cache.evict_to(0);
  EXPECT_TRUE(cache.slots_free(0, 8));
}

}  // namespace
}  // namespace ts
