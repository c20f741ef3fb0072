// The KV cache's head-major layout: rows written as [n, kv_heads, head_dim] read back the same through read_row and
// through rows() as kernels::attention_tiled addresses it (what attention reads: keys in tiles of 16), across capacity
// growth, tree commits, truncation, shared blocks read in place and both dtypes; bad requests throw and leave the
// cache usable.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/kv_cache.h"

namespace ts {
namespace {

constexpr int kLayers = 2, kHeads = 3, kHeadDim = 5, kDim = kHeads * kHeadDim, kMax = 300;

// The committed rows a cache should hold: [rows][layer][keys | values][kDim], already rounded to the dtype.
using Rows = std::vector<std::vector<std::vector<float>>>;

float stored(float x, DType dtype) { return dtype == DType::BF16 ? bf16_to_f32(f32_to_bf16(x)) : x; }

// Element d of head g of row j through rows(layer), at the addresses kernels::attention_tiled reads (kv_span.h): the
// span holding row j, keys in tiles of 16, values in rows.
float strided(const KVCache& cache, int layer, bool value, int j, int g, int d) {
  const KVRows kv = cache.rows(layer);
  EXPECT_GE(kv.n_spans, 1);
  EXPECT_EQ(kv.spans[0].first_row, 0);
  const kernels::KVSpan& span = kernels::span_holding(kv.spans, kv.n_spans, j);
  EXPECT_EQ(span.first_row % 16, 0);
  EXPECT_EQ(span.head_stride % (16 * kHeadDim), 0);  // whole tiles per head
  const int r = j - span.first_row;
  const int64_t at = g * span.head_stride + (value ? r * kHeadDim + d : (r / 16) * 16 * kHeadDim + d * 16 + r % 16);
  const void* base = value ? span.v : span.k;
  if (kv.dtype == DType::F32) return static_cast<const float*>(base)[at];
  return bf16_to_f32(static_cast<const uint16_t*>(base)[at]);
}

void expect_holds(const KVCache& cache, const Rows& want) {
  ASSERT_EQ(cache.length(), int(want.size()));
  std::vector<float> k(kDim), v(kDim);
  for (int j = 0; j < cache.length(); ++j)
    for (int l = 0; l < kLayers; ++l) {
      cache.read_row(l, j, k.data(), v.data());
      for (int e = 0; e < kDim; ++e) {
        ASSERT_EQ(k[e], want[j][l][e]) << "row " << j << " layer " << l << " key element " << e;
        ASSERT_EQ(v[e], want[j][l][kDim + e]) << "row " << j << " layer " << l << " value element " << e;
        ASSERT_EQ(strided(cache, l, false, j, e / kHeadDim, e % kHeadDim), want[j][l][e]);
        ASSERT_EQ(strided(cache, l, true, j, e / kHeadDim, e % kHeadDim), want[j][l][kDim + e]);
      }
    }
}

// Appends n pending rows of random values; returns them as [n][layer][keys | values]. by_head: written one KV head
// at a time, last head first (write_pending_heads, as attention's per-head hook writes them).
Rows append(KVCache& cache, int n, std::mt19937& rng, bool by_head = false) {
  std::normal_distribution<float> normal;
  cache.begin_append(n);
  Rows rows(n, std::vector<std::vector<float>>(kLayers, std::vector<float>(2 * kDim)));
  for (int l = 0; l < kLayers; ++l) {
    std::vector<float> k(size_t(n) * kDim), v(size_t(n) * kDim);  // [n, kv_heads, head_dim]
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    if (by_head) {
      for (int g = kHeads - 1; g >= 0; --g) cache.write_pending_heads(l, 0, n, k.data(), v.data(), g, g + 1);
    } else {
      cache.write_pending(l, 0, n, k.data(), v.data());
    }
    for (int r = 0; r < n; ++r)
      for (int e = 0; e < kDim; ++e) {
        rows[r][l][e] = stored(k[size_t(r) * kDim + e], cache.dtype());
        rows[r][l][kDim + e] = stored(v[size_t(r) * kDim + e], cache.dtype());
      }
  }
  return rows;
}

class KVCacheLayout : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, KVCacheLayout, ::testing::Values(DType::F32, DType::BF16));

TEST_P(KVCacheLayout, RowsSurviveGrowthCommitsAndTruncation) {
  std::mt19937 rng(5);
  KVCache cache(kLayers, kHeads, kHeadDim, kMax, GetParam());
  EXPECT_EQ(cache.kv_dim(), kDim);
  Rows want;
  // 50 rows (capacity 64), then a tree of 40 pending rows of which 6 are kept (capacity 128: each head's rows move).
  Rows first = append(cache, 50, rng);
  cache.commit_all();
  want.insert(want.end(), first.begin(), first.end());
  expect_holds(cache, want);
  Rows tree = append(cache, 40, rng);
  const std::vector<int32_t> keep = {0, 3, 4, 17, 30, 39};
  cache.commit(keep);
  for (int32_t i : keep) want.push_back(tree[i]);
  expect_holds(cache, want);
  // 100 more, all kept: growth to 256.
  Rows late = append(cache, 100, rng);
  cache.commit_all();
  want.insert(want.end(), late.begin(), late.end());
  expect_holds(cache, want);
  // Truncation forgets the tail; new rows take its place.
  cache.truncate(70);
  want.resize(70);
  expect_holds(cache, want);
  Rows again = append(cache, 3, rng);
  cache.commit({1});
  want.push_back(again[1]);
  expect_holds(cache, want);
}

// Rows [first, first + n) of `want` written as a cache's next rows (begin_append, write_pending, commit_all).
void append_rows(KVCache& cache, const Rows& want, int first, int n) {
  cache.begin_append(n);
  for (int l = 0; l < kLayers; ++l) {
    std::vector<float> k(size_t(n) * kDim), v(k.size());  // [n, kv_heads, head_dim]
    for (int r = 0; r < n; ++r)
      for (int e = 0; e < kDim; ++e) {
        k[size_t(r) * kDim + e] = want[first + r][l][e];
        v[size_t(r) * kDim + e] = want[first + r][l][kDim + e];
      }
    cache.write_pending(l, 0, n, k.data(), v.data());
  }
  cache.commit_all();
}

// A cache of `rows` committed rows not written yet, as the prefix cache's pool chunks are made.
KVCache pool_of(int rows, DType dtype) {
  KVCache pool(kLayers, kHeads, kHeadDim, rows, dtype);
  pool.begin_append(rows);
  pool.commit_all();
  return pool;
}

// The prefix cache's pool takes runs of a request's rows (overwrite_rows); other caches read them in place as their
// first rows (share_rows): the bits survive, runs that continue each other in the pool become one span, own rows
// follow them across growth and tree commits, and the pool is never written through them.
TEST_P(KVCacheLayout, SharedRowsReadInPlaceBeforeOwnRows) {
  std::mt19937 rng(7);
  KVCache source(kLayers, kHeads, kHeadDim, kMax, GetParam());
  Rows rows = append(source, 90, rng);
  source.commit_all();
  KVCache pool = pool_of(128, GetParam());
  pool.overwrite_rows(32, 48, source, 0);   // source rows [0, 48) at pool rows [32, 80)
  pool.overwrite_rows(96, 16, source, 48);  // source rows [48, 64) at [96, 112)
  KVCache dest(kLayers, kHeads, kHeadDim, kMax, GetParam());
  dest.share_rows(pool, 32, 16);
  dest.share_rows(pool, 48, 32);  // continues the run: the same span
  dest.share_rows(pool, 96, 16);  // another run
  EXPECT_EQ(dest.shared_rows(), 64);
  EXPECT_EQ(dest.rows(0).n_spans, 2);  // no own rows yet
  Rows want(rows.begin(), rows.begin() + 64);
  expect_holds(dest, want);
  // Own rows follow (a prefill continues after its cached prefix), through growth and a tree commit.
  Rows after = append(dest, 70, rng);
  dest.commit_all();
  want.insert(want.end(), after.begin(), after.end());
  EXPECT_EQ(dest.rows(0).n_spans, 3);
  expect_holds(dest, want);
  Rows tree = append(dest, 5, rng);
  dest.commit({0, 2, 3});
  for (int i : {0, 2, 3}) want.push_back(tree[i]);
  expect_holds(dest, want);
  // Rows copied out of dest (shared and own alike) are dest's rows; the pool's rows are the source's still.
  KVCache copy = pool_of(128, GetParam());
  copy.overwrite_rows(0, 96, dest, 32);
  KVCache flat(kLayers, kHeads, kHeadDim, kMax, GetParam());
  append_rows(flat, want, 32, 96);
  for (int l = 0; l < kLayers; ++l)
    for (int j = 0; j < 96; ++j) {
      std::vector<float> a(kDim), b(kDim), c(kDim), d(kDim);
      copy.read_row(l, j, a.data(), b.data());
      flat.read_row(l, j, c.data(), d.data());
      ASSERT_EQ(a, c) << "row " << j;
      ASSERT_EQ(b, d) << "row " << j;
    }
  KVCache pool_view(kLayers, kHeads, kHeadDim, kMax, GetParam());
  pool_view.share_rows(pool, 32, 48);
  expect_holds(pool_view, Rows(rows.begin(), rows.begin() + 48));

  EXPECT_THROW(pool.overwrite_rows(8, 16, source, 0), Error);    // not whole tiles
  EXPECT_THROW(pool.overwrite_rows(0, 16, source, 80), Error);   // past the source's rows
  EXPECT_THROW(dest.share_rows(pool, 0, 16), Error);             // after own rows
  EXPECT_THROW(dest.truncate(40), Error);                        // into the shared rows
  KVCache fresh(kLayers, kHeads, kHeadDim, kMax, GetParam());
  EXPECT_THROW(fresh.share_rows(pool, 0, 8), Error);     // not whole tiles
  EXPECT_THROW(fresh.share_rows(pool, 120, 16), Error);  // past the pool's rows
  fresh.begin_append(1);
  EXPECT_THROW(fresh.share_rows(pool, 0, 16), Error);  // pending rows
  KVCache small(kLayers, kHeads, kHeadDim, 20, GetParam());
  small.share_rows(pool, 32, 16);
  EXPECT_THROW(small.share_rows(pool, 48, 16), Error);  // over max_tokens
  EXPECT_EQ(small.length(), 16);
  Rows tail = append(small, 4, rng);  // own rows up to max_tokens
  small.commit_all();
  want.assign(rows.begin(), rows.begin() + 16);
  want.insert(want.end(), tail.begin(), tail.end());
  expect_holds(small, want);
  KVCache other_shape(kLayers, kHeads + 1, kHeadDim, kMax, GetParam());
  EXPECT_THROW(other_shape.share_rows(pool, 32, 16), Error);
}

// A prefix cache tail: rows copied (not shared) from the pool right after the shared ones, a partial tile of them
// (the other key lanes of that tile stay zero, as attention reads whole tiles), then own rows computed after them.
TEST_P(KVCacheLayout, AppendedRowsCopyAPartialTileAfterTheSharedRows) {
  std::mt19937 rng(9);
  KVCache source(kLayers, kHeads, kHeadDim, kMax, GetParam());
  Rows rows = append(source, 40, rng);
  source.commit_all();
  KVCache pool = pool_of(64, GetParam());
  pool.overwrite_rows(0, 16, source, 0);
  pool.overwrite_rows(32, 13, source, 16);  // a tail of 13 rows
  KVCache dest(kLayers, kHeads, kHeadDim, kMax, GetParam());
  dest.share_rows(pool, 0, 16);
  dest.append_rows(pool, 32, 5);  // its first 5 rows
  EXPECT_EQ(dest.shared_rows(), 16);
  Rows want(rows.begin(), rows.begin() + 21);
  expect_holds(dest, want);
  for (int l = 0; l < kLayers; ++l)
    for (int j = 21; j < 32; ++j)
      for (int g = 0; g < kHeads; ++g)
        for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(strided(dest, l, false, j, g, d), 0.0f) << "lane " << j;
  Rows more = append(dest, 20, rng);
  dest.commit_all();
  want.insert(want.end(), more.begin(), more.end());
  expect_holds(dest, want);
  EXPECT_THROW(dest.append_rows(pool, 32, 4), Error);  // own rows not on a tile bound (41 - 16 = 25)
  EXPECT_EQ(dest.length(), 41);
}

// Buffers are not zeroed when allocated, and attention reads whole key tiles: the lanes past the last row of a tile
// must be set all the same. Heap blocks of the buffers' size are filled with NaN bits and freed first, so the cache's
// allocations (which the heap hands back in reverse order) start out as garbage, not as fresh zero pages.
TEST_P(KVCacheLayout, KeyLanesPastTheLastRowAreZero) {
  const int rows_64 = 64;  // the first allocation's rows
  const size_t buffer_bytes = size_t(kHeads) * rows_64 * kHeadDim * dtype_size(GetParam());
  {
    std::vector<std::vector<uint8_t>> garbage;
    for (int i = 0; i < 2 * kLayers; ++i) garbage.emplace_back(buffer_bytes, uint8_t(0xff));
  }
  std::mt19937 rng(8);
  KVCache cache(kLayers, kHeads, kHeadDim, kMax, GetParam());
  for (int rows : {5, 16, 21, 40, 77}) {  // within a tile, on a bound, and across a growth to 128 rows
    append(cache, rows - cache.length(), rng);
    cache.commit_all();
    for (int l = 0; l < kLayers; ++l)
      for (int j = rows; j < (rows + 15) / 16 * 16; ++j)
        for (int g = 0; g < kHeads; ++g)
          for (int d = 0; d < kHeadDim; ++d)
            ASSERT_EQ(strided(cache, l, false, j, g, d), 0.0f) << "rows " << rows << " lane " << j << " layer " << l;
  }
}

TEST_P(KVCacheLayout, RowsWrittenHeadByHeadEqualRowsWrittenWhole) {
  std::mt19937 rng_whole(12), rng_heads(12);
  KVCache whole(kLayers, kHeads, kHeadDim, kMax, GetParam()), by_head(kLayers, kHeads, kHeadDim, kMax, GetParam());
  Rows want;
  for (int n : {1, 7, 16, 9}) {  // within a tile, across tile bounds
    Rows rows = append(whole, n, rng_whole);
    append(by_head, n, rng_heads, true);
    whole.commit_all();
    by_head.commit_all();
    want.insert(want.end(), rows.begin(), rows.end());
    expect_holds(whole, want);
    expect_holds(by_head, want);
  }
  by_head.begin_append(1);
  std::vector<float> row(kDim);
  EXPECT_THROW(by_head.write_pending_heads(0, 0, 1, row.data(), row.data(), 2, kHeads + 1), Error);
  EXPECT_THROW(by_head.write_pending_heads(0, 0, 1, row.data(), row.data(), 2, 1), Error);
}

TEST_P(KVCacheLayout, BadRequestsThrowAndLoseNothing) {
  std::mt19937 rng(6);
  KVCache cache(kLayers, kHeads, kHeadDim, kMax, GetParam());
  Rows want = append(cache, 10, rng);
  cache.commit_all();
  std::vector<float> row(size_t(2) * kDim, 1.0f);
  EXPECT_THROW(cache.begin_append(kMax - 9), Error);  // context too long
  cache.begin_append(2);
  EXPECT_THROW(cache.write_pending(0, 1, 2, row.data(), row.data()), Error);  // past the pending rows
  EXPECT_THROW(cache.write_pending(kLayers, 0, 1, row.data(), row.data()), Error);
  EXPECT_THROW(cache.commit({1, 1}), Error);  // indices must increase
  cache.drop_pending();
  std::vector<float> k(kDim), v(kDim);
  EXPECT_THROW(cache.read_row(0, 10, k.data(), v.data()), Error);
  expect_holds(cache, want);
  EXPECT_THROW(KVCache(kLayers, 0, kHeadDim, kMax), Error);
  EXPECT_THROW(KVCache(kLayers, kHeads, kHeadDim, kMax, DType::F16), Error);
}

}  // namespace
}  // namespace ts
