// The KV cache's head-major layout: rows written as [n, kv_heads, head_dim] read back the same through read_row and
// through rows() as kernels::attention_tiled addresses it (what attention reads: keys in tiles of 16), across capacity
// growth, tree commits, truncation and both dtypes; bad requests throw and leave the cache usable.
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

// Element d of head g of row j through rows(layer), at ops.h's attention_tiled addresses: what attention reads.
float strided(const KVCache& cache, int layer, bool value, int j, int g, int d) {
  const KVRows kv = cache.rows(layer);
  EXPECT_EQ(kv.row_stride, kHeadDim);
  EXPECT_EQ(kv.head_stride % (16 * kHeadDim), 0);  // whole tiles per head
  const int64_t at = g * kv.head_stride + (value ? j * kv.row_stride + d : (j / 16) * 16 * kHeadDim + d * 16 + j % 16);
  const void* base = value ? kv.v : kv.k;
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

// Appends n pending rows of random values; returns them as [n][layer][keys | values].
Rows append(KVCache& cache, int n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  cache.begin_append(n);
  Rows rows(n, std::vector<std::vector<float>>(kLayers, std::vector<float>(2 * kDim)));
  for (int l = 0; l < kLayers; ++l) {
    std::vector<float> k(size_t(n) * kDim), v(size_t(n) * kDim);  // [n, kv_heads, head_dim]
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    cache.write_pending(l, 0, n, k.data(), v.data());
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

// The prefix cache copies blocks of committed rows out of one cache and into another: the bits survive, the rows
// land after what the receiving cache already holds, in any order of growth.
TEST_P(KVCacheLayout, ExportedRowsImportBitExactAfterExistingRows) {
  std::mt19937 rng(7);
  KVCache source(kLayers, kHeads, kHeadDim, kMax, GetParam());
  Rows rows = append(source, 90, rng);
  source.commit_all();
  const int64_t block_bytes = 16 * source.bytes_per_row();
  std::vector<uint8_t> a(block_bytes), b(block_bytes);  // [layers, 2, heads, 16 * head_dim] each
  source.export_rows(16, 16, a.data());
  source.export_rows(32, 16, b.data());
  KVCache dest(kLayers, kHeads, kHeadDim, kMax, GetParam());
  Rows want = append(dest, 5, rng);
  dest.commit_all();
  dest.import_rows(16, a.data());
  dest.import_rows(16, b.data());
  want.insert(want.end(), rows.begin() + 16, rows.begin() + 48);
  expect_holds(dest, want);
  // Rows can follow an import (a prefill continues after its cached prefix).
  Rows after = append(dest, 70, rng);
  dest.commit_all();
  want.insert(want.end(), after.begin(), after.end());
  expect_holds(dest, want);
  // Rows off the 16-row key tiles on both sides (runs split at tile bounds differently in each cache).
  std::vector<uint8_t> c(23 * source.bytes_per_row());
  source.export_rows(7, 23, c.data());
  dest.import_rows(23, c.data());
  want.insert(want.end(), rows.begin() + 7, rows.begin() + 30);
  expect_holds(dest, want);
  EXPECT_THROW(source.export_rows(80, 16, a.data()), Error);  // past the committed rows
  dest.begin_append(1);
  EXPECT_THROW(dest.import_rows(16, a.data()), Error);  // pending rows
  dest.drop_pending();
  KVCache small(kLayers, kHeads, kHeadDim, 20, GetParam());
  small.import_rows(16, a.data());
  EXPECT_THROW(small.import_rows(16, b.data()), Error);  // over max_tokens
  EXPECT_EQ(small.length(), 16);
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
