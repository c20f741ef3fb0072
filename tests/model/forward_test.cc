// Properties of the target forward that speculative decoding relies on: a tree-masked batch gives every node the
// logits of the sequential forward of its root path; keeping a subset of a tree's KV rows then decoding equals
// recomputing; a multi-sequence batch equals the sequences run one by one. Checked for exact (bitwise) equality,
// since greedy speculative output must equal plain greedy output token for token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "model_test_util.h"

namespace ts {
namespace {

using testing::run_sequence;
using testing::temp_dir;

// (weights dtype, KV cache dtype): every property holds for f32 and bf16 caches alike.
class ForwardTest : public ::testing::TestWithParam<std::tuple<DType, DType>> {
 protected:
  void SetUp() override {
    dir_ = temp_dir("fwd");
    ModelConfig c = tiny_qwen3_config(/*vocab=*/97, /*hidden=*/48, /*layers=*/2);
    write_random_model(dir_, c, std::get<0>(GetParam()), 1234);
    model_ = TargetModel::load(dir_);
    model_->set_kv_dtype(std::get<1>(GetParam()));
  }
  std::string dir_;
  std::unique_ptr<TargetModel> model_;
};

TEST_P(ForwardTest, TreeMaskedRowsEqualSequentialRootPaths) {
  TargetModel& m = *model_;
  const int V = m.config().vocab_size;
  const std::vector<int32_t> prefix = {5, 17, 3, 88, 41};
  // Tree over the prefix: node 0 (token 7) is the root; children listed by parent.
  const std::vector<int32_t> tree_tokens = {7, 12, 30, 9, 12, 60, 2};
  const std::vector<int32_t> tree_parent = {-1, 0, 0, 1, 1, 2, 4};
  const int n = int(tree_tokens.size());
  std::vector<int32_t> depth(n, 0);
  for (int i = 1; i < n; ++i) depth[i] = depth[tree_parent[i]] + 1;

  KVCache cache = m.new_cache(256);
  {
    ForwardBatch b;
    b.tokens = prefix;
    for (int i = 0; i < int(prefix.size()); ++i) b.positions.push_back(i);
    ForwardResult r;
    m.forward(b, {&cache}, &r);
    cache.commit_all();
  }
  ForwardBatch b;
  b.tokens = tree_tokens;
  b.visible.assign(size_t(n) * n, 0);
  for (int i = 0; i < n; ++i) {
    b.positions.push_back(int(prefix.size()) + depth[i]);
    b.logit_rows.push_back(i);
    for (int a = i; a >= 0; a = tree_parent[a]) b.visible[size_t(i) * n + a] = 1;
  }
  ForwardResult tree;
  m.forward(b, {&cache}, &tree);

  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> path;
    for (int a = i; a >= 0; a = tree_parent[a]) path.insert(path.begin(), tree_tokens[a]);
    std::vector<int32_t> seq = prefix;
    seq.insert(seq.end(), path.begin(), path.end());
    std::vector<float> ref = run_sequence(m, seq);
    const float* want = &ref[size_t(seq.size() - 1) * V];
    const float* got = &tree.logits[size_t(i) * V];
    for (int v = 0; v < V; ++v) ASSERT_EQ(got[v], want[v]) << "node " << i << " vocab " << v;
  }
}

TEST_P(ForwardTest, KeepingAcceptedPathThenDecodingEqualsRecompute) {
  TargetModel& m = *model_;
  const int V = m.config().vocab_size;
  const std::vector<int32_t> prefix = {1, 2, 3, 4};
  // A tree of 5 nodes; accept the path 0 -> 2 -> 4, reject 1 and 3.
  const std::vector<int32_t> tokens = {10, 20, 21, 30, 31};
  const std::vector<int32_t> parent = {-1, 0, 0, 1, 2};
  const int n = 5;
  KVCache cache = m.new_cache(256);
  ForwardResult r;
  {
    ForwardBatch b;
    b.tokens = prefix;
    b.positions = {0, 1, 2, 3};
    m.forward(b, {&cache}, &r);
    cache.commit_all();
  }
  ForwardBatch t;
  t.tokens = tokens;
  t.visible.assign(n * n, 0);
  for (int i = 0; i < n; ++i) {
    int d = 0;
    for (int a = i; a >= 0; a = parent[a], ++d) t.visible[i * n + a] = 1;
    t.positions.push_back(4 + d - 1);
  }
  m.forward(t, {&cache}, &r);
  cache.commit({0, 2, 4});
  EXPECT_EQ(cache.length(), 7);
  // Decode one more token after the kept path.
  ForwardBatch next;
  next.tokens = {55};
  next.positions = {7};
  next.logit_rows = {0};
  m.forward(next, {&cache}, &r);
  cache.commit_all();

  std::vector<float> ref = run_sequence(m, {1, 2, 3, 4, 10, 21, 31, 55});
  for (int v = 0; v < V; ++v) ASSERT_EQ(r.logits[v], ref[size_t(7) * V + v]) << v;
}

TEST_P(ForwardTest, MultiSequenceBatchEqualsOneByOne) {
  TargetModel& m = *model_;
  const int V = m.config().vocab_size;
  const std::vector<std::vector<int32_t>> seqs = {{3, 1, 4, 1, 5}, {9, 2, 6}, {5, 3, 5, 8, 9, 7, 9}};
  std::vector<KVCache> caches;
  for (size_t s = 0; s < seqs.size(); ++s) caches.push_back(m.new_cache(64));
  std::vector<KVCache*> ptrs;
  for (auto& c : caches) ptrs.push_back(&c);
  // Feed the first 2 tokens of each, then the rest, both batched across sequences.
  ForwardBatch first, rest;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (size_t i = 0; i < seqs[s].size(); ++i) {
      ForwardBatch& b = i < 2 ? first : rest;
      b.tokens.push_back(seqs[s][i]);
      b.positions.push_back(int(i));
      b.seq.push_back(int(s));
      if (i >= 2) b.logit_rows.push_back(int(b.tokens.size()) - 1);
    }
  }
  ForwardResult r;
  m.forward(first, ptrs, &r);
  for (auto& c : caches) c.commit_all();
  m.forward(rest, ptrs, &r);
  int row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<float> ref = run_sequence(m, seqs[s]);
    for (size_t i = 2; i < seqs[s].size(); ++i, ++row)
      for (int v = 0; v < V; ++v) ASSERT_EQ(r.logits[size_t(row) * V + v], ref[i * V + v]) << s << " " << i;
  }
}

TEST_P(ForwardTest, BadInputIsAnErrorNotACrash) {
  TargetModel& m = *model_;
  KVCache cache = m.new_cache(8);
  ForwardBatch b;
  ForwardResult r;
  b.tokens = {1000};
  b.positions = {0};
  EXPECT_THROW(m.forward(b, {&cache}, &r), Error);
  b.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  b.positions = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  try {
    m.forward(b, {&cache}, &r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
}

// A bf16 cache rounds each K/V element once (relative error <= 2^-9): a sequence's logits stay within a bound of
// the f32 cache's, and the cache holds half the bytes.
TEST_P(ForwardTest, Bf16CacheStaysCloseToF32Cache) {
  TargetModel& m = *model_;
  const std::vector<int32_t> seq = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};
  m.set_kv_dtype(DType::F32);
  const std::vector<float> f32 = run_sequence(m, seq);
  const int64_t f32_bytes = m.new_cache(8).bytes_per_row();
  m.set_kv_dtype(DType::BF16);
  const std::vector<float> bf16 = run_sequence(m, seq);
  EXPECT_EQ(m.new_cache(8).bytes_per_row() * 2, f32_bytes);
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    max_abs = std::max(max_abs, double(std::abs(f32[i])));
    max_err = std::max(max_err, double(std::abs(f32[i] - bf16[i])));
  }
  EXPECT_GT(max_err, 0.0) << "a bf16 cache that changes nothing is not rounding";
  EXPECT_LT(max_err, 2e-2 * max_abs) << "bf16 KV moved the logits by " << max_err << " of " << max_abs;
  EXPECT_THROW(m.set_kv_dtype(DType::F16), Error);
}

INSTANTIATE_TEST_SUITE_P(DTypes, ForwardTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return std::string("weights_") + dtype_name(std::get<0>(info.param)) + "_kv_" +
                                  dtype_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ts
