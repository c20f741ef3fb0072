// Masked grouped-query attention: fast vs reference with a tolerance derived from the data, and the properties
// tree verification relies on: masked keys contribute exactly nothing, and a tree row is bit-identical to the
// same query attending alone to just its visible keys (a sequential forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace ts::kernels {
namespace {

using testing::bit_differences;
using testing::PerIsa;
using testing::kU32;
using testing::random_normal;

struct Problem {
  int n_q, n_kv, n_heads, n_kv_heads, head_dim;
  std::vector<float> q, k, v;      // [n_q, n_heads, hd], [n_kv, n_kv_heads, hd] x2
  std::vector<uint8_t> visible;    // [n_q, n_kv]
  float scale() const { return 1.0f / std::sqrt(float(head_dim)); }
};

Problem make_problem(int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, uint32_t seed) {
  Problem p{n_q, n_kv, n_heads, n_kv_heads, head_dim, {}, {}, {}, {}};
  p.q = random_normal(size_t(n_q) * n_heads * head_dim, 2.0f, seed);
  p.k = random_normal(size_t(n_kv) * n_kv_heads * head_dim, 2.0f, seed + 1);
  p.v = random_normal(size_t(n_kv) * n_kv_heads * head_dim, 1.0f, seed + 2);
  p.visible.assign(size_t(n_q) * n_kv, 0);
  return p;
}

// A draft tree appended after a prefix of `prefix` cached keys: node i (key row prefix + i) has parent
// parent[i] < i (or -1 = the prefix); query row i sees the whole prefix, its ancestors and itself.
void tree_mask(Problem& p, int prefix, const std::vector<int>& parent) {
  for (int i = 0; i < p.n_q; ++i) {
    uint8_t* row = &p.visible[size_t(i) * p.n_kv];
    std::fill(row, row + prefix, 1);
    for (int node = i; node >= 0; node = parent[node]) row[prefix + node] = 1;
  }
}

std::vector<int> random_tree(int nodes, std::mt19937& rng) {
  std::vector<int> parent(nodes);
  for (int i = 0; i < nodes; ++i) parent[i] = i == 0 ? -1 : int(rng() % (i + 1)) - 1;
  return parent;
}

struct Shape {
  int n_q, n_kv, n_heads, n_kv_heads, head_dim;
};

// A problem of shape s with a draft tree over its last n_q keys (tree), or a random mask where each row sees at least
// one key.
Problem tree_or_random_problem(const Shape& s, bool tree, std::mt19937& rng) {
  Problem p = make_problem(s.n_q, s.n_kv, s.n_heads, s.n_kv_heads, s.head_dim, rng());
  if (tree) {
    tree_mask(p, s.n_kv - s.n_q, random_tree(s.n_q, rng));
    return p;
  }
  for (int i = 0; i < s.n_q; ++i) {
    for (int j = 0; j < s.n_kv; ++j) p.visible[size_t(i) * s.n_kv + j] = rng() % 3 != 0;
    p.visible[size_t(i) * s.n_kv + rng() % s.n_kv] = 1;
  }
  return p;
}

// |fast - ref| bound per output element, for vectors of W lanes. With E = max over visible j of the score's error
// (dot product, one FMA chain over head_dim: (hd + 4) u sum|q k| scale, the shift by the max: |s - max| u, exp:
// 2 u), each p_j has relative error <= E, the normaliser <= E + (n_vis/W + 4) u, and the weighted sum adds n_vis u
// relative to sum p|v|. So |err_d| <= A_d (2E + (n_vis + n_vis/W + 8) u) with A_d = sum_j p_j |v_jd| / sum_j p_j;
// doubled for slack.
// bf16_operands: the variant rounds q and the numerators p to bf16 (unit roundoff b = 2^-8) for its dot products,
// which adds b sum|q k| scale to each score's error and b to each p_j's.
void expect_close_to_reference(const Problem& p, const std::vector<float>& fast, bool bf16_operands = false) {
  const double b = bf16_operands ? 1.0 / 256 : 0.0;
  const double W = simd_lanes();
  std::vector<float> ref(fast.size());
  ref::attention(p.q.data(), p.k.data(), p.v.data(), p.visible.data(), ref.data(), p.n_q, p.n_kv, p.n_heads,
                 p.n_kv_heads, p.head_dim, p.scale());
  const int hd = p.head_dim, group = p.n_heads / p.n_kv_heads;
  for (int i = 0; i < p.n_q; ++i)
    for (int h = 0; h < p.n_heads; ++h) {
      const float* q = &p.q[(size_t(i) * p.n_heads + h) * hd];
      const int kvh = h / group;
      std::vector<double> s(p.n_kv), abs_dot(p.n_kv);
      double max_s = -INFINITY;
      int n_vis = 0;
      for (int j = 0; j < p.n_kv; ++j) {
        if (!p.visible[size_t(i) * p.n_kv + j]) continue;
        const float* k = &p.k[(size_t(j) * p.n_kv_heads + kvh) * hd];
        double dot = 0, ad = 0;
        for (int d = 0; d < hd; ++d) dot += double(q[d]) * k[d], ad += std::abs(double(q[d]) * k[d]);
        s[j] = dot * p.scale(), abs_dot[j] = ad * p.scale();
        max_s = std::max(max_s, s[j]);
        ++n_vis;
      }
      double E = 0, sum_p = 0;
      std::vector<double> A(hd, 0.0);
      for (int j = 0; j < p.n_kv; ++j) {
        if (!p.visible[size_t(i) * p.n_kv + j]) continue;
        E = std::max(E, ((hd + 4) * abs_dot[j] + std::abs(s[j] - max_s) + 2) * kU32 + b * (abs_dot[j] + 1));
        const double pj = std::exp(s[j] - max_s);
        sum_p += pj;
        const float* v = &p.v[(size_t(j) * p.n_kv_heads + kvh) * hd];
        for (int d = 0; d < hd; ++d) A[d] += pj * std::abs(v[d]);
      }
      for (int d = 0; d < hd; ++d) {
        const size_t o = (size_t(i) * p.n_heads + h) * hd + d;
        const double tol = 2.0 * A[d] / sum_p * (2 * E + (n_vis + n_vis / W + 8) * kU32);
        ASSERT_NEAR(fast[o], ref[o], tol) << "row " << i << " head " << h << " d " << d;
      }
    }
}

std::vector<float> run_fast(const Problem& p) {
  std::vector<float> out(p.q.size());
  attention(p.q.data(), p.k.data(), p.v.data(), p.visible.data(), out.data(), p.n_q, p.n_kv, p.n_heads,
            p.n_kv_heads, p.head_dim, p.scale());
  return out;
}

class Attention : public PerIsa {
 protected:
  // Whether this variant takes bf16 K/V with vdpbf16ps (q and p rounded to bf16): avx512bf16, for head_dim a
  // multiple of 16 (amx keeps avx512's FMAs over widened values).
  bool bf16_dot_products(int head_dim) const { return GetParam() == Isa::Avx512Bf16 && head_dim % 16 == 0; }
};
TS_INSTANTIATE_PER_ISA(Attention);

TEST_P(Attention, MatchesReferenceOverShapesAndMasks) {
  std::mt19937 rng(42);
  // head_dim 32/64/128, 48 + 200 (not multiples of 16: masked tails, > 128 register block), 36 and 20 (not
  // multiples of 8); query rows 1, 3, 8, 17, 64; GQA ratios 1, 2, 4.
  for (Shape s : {Shape{1, 1, 2, 2, 64}, Shape{3, 17, 4, 4, 32}, Shape{7, 40, 8, 4, 64}, Shape{16, 70, 16, 4, 128},
                  Shape{17, 29, 4, 2, 36}, Shape{8, 23, 2, 1, 20}, Shape{64, 80, 2, 2, 24},
                  Shape{5, 33, 4, 2, 48}, Shape{4, 9, 2, 1, 200}}) {
    Problem p = tree_or_random_problem(s, false, rng);
    expect_close_to_reference(p, run_fast(p));
    // Causal.
    if (s.n_kv >= s.n_q) {
      for (int i = 0; i < s.n_q; ++i)
        for (int j = 0; j < s.n_kv; ++j) p.visible[size_t(i) * s.n_kv + j] = j <= s.n_kv - s.n_q + i;
      expect_close_to_reference(p, run_fast(p));
    }
  }
}

TEST_P(Attention, TreeRowsEqualSequentialForwardBitForBit) {
  std::mt19937 rng(7);
  // Trials 6-9 have prefixes of 1-3 whole key blocks (64 keys): rows that see a whole block take the dense tiles,
  // the tree's last block the per-row path, and the node alone sees only whole blocks.
  for (int trial = 0; trial < 10; ++trial) {
    const int nodes = 1 + int(rng() % 24), prefix = trial < 6 ? int(rng() % 50) : 64 + int(rng() % 150);
    const int kv_heads = 2, heads = kv_heads * (1 << (trial % 3)), hd = trial % 2 ? 128 : 64;
    Problem p = make_problem(nodes, prefix + nodes, heads, kv_heads, hd, rng());
    tree_mask(p, prefix, random_tree(nodes, rng));
    const std::vector<float> batch = run_fast(p);
    expect_close_to_reference(p, batch);
    // The same K/V as bf16 bits (a bf16 KV cache; the dot-product paths on avx512bf16).
    std::vector<uint16_t> k16(p.k.size()), v16(p.v.size());
    for (size_t e = 0; e < p.k.size(); ++e) k16[e] = f32_to_bf16(p.k[e]), v16[e] = f32_to_bf16(p.v[e]);
    std::vector<float> batch16(batch.size());
    attention_bf16kv(p.q.data(), k16.data(), v16.data(), p.visible.data(), batch16.data(), p.n_q, p.n_kv, heads,
                     kv_heads, hd, p.scale());
    const size_t row_q = size_t(heads) * hd, row_kv = size_t(kv_heads) * hd;
    for (int i = 0; i < nodes; ++i) {
      // The sequential forward of this node: only its path's keys, in order, all visible.
      std::vector<float> k_path, v_path;
      std::vector<uint16_t> k16_path, v16_path;
      for (int j = 0; j < p.n_kv; ++j) {
        if (!p.visible[size_t(i) * p.n_kv + j]) continue;
        k_path.insert(k_path.end(), p.k.begin() + j * row_kv, p.k.begin() + (j + 1) * row_kv);
        v_path.insert(v_path.end(), p.v.begin() + j * row_kv, p.v.begin() + (j + 1) * row_kv);
        k16_path.insert(k16_path.end(), k16.begin() + j * row_kv, k16.begin() + (j + 1) * row_kv);
        v16_path.insert(v16_path.end(), v16.begin() + j * row_kv, v16.begin() + (j + 1) * row_kv);
      }
      const int n_path = int(k_path.size() / row_kv);
      std::vector<uint8_t> all(n_path, 1);
      std::vector<float> alone(row_q), alone16(row_q);
      attention(p.q.data() + i * row_q, k_path.data(), v_path.data(), all.data(), alone.data(), 1, n_path, heads,
                kv_heads, hd, p.scale());
      ASSERT_EQ(bit_differences(alone.data(), batch.data() + i * row_q, row_q), 0u)
          << "trial " << trial << " node " << i << " of " << nodes;
      attention_bf16kv(p.q.data() + i * row_q, k16_path.data(), v16_path.data(), all.data(), alone16.data(), 1,
                       n_path, heads, kv_heads, hd, p.scale());
      ASSERT_EQ(bit_differences(alone16.data(), batch16.data() + i * row_q, row_q), 0u)
          << "bf16 K/V, trial " << trial << " node " << i << " of " << nodes;
    }
  }
}

TEST_P(Attention, MaskedKeysContributeNothing) {
  Problem p = make_problem(4, 20, 4, 2, 64, 99);
  for (int i = 0; i < p.n_q; ++i)
    for (int j = 0; j < p.n_kv; ++j) p.visible[size_t(i) * p.n_kv + j] = (j % 8 == i) || j == 0;  // keys 4-7, 12-15 unseen
  const std::vector<float> clean = run_fast(p);
  // Poison the key/value rows nobody sees with NaN keys and infinite values.
  for (int j = 0; j < p.n_kv; ++j) {
    bool seen = false;
    for (int i = 0; i < p.n_q; ++i) seen |= p.visible[size_t(i) * p.n_kv + j] != 0;
    if (seen) continue;
    for (int d = 0; d < p.n_kv_heads * p.head_dim; ++d) {
      p.k[size_t(j) * p.n_kv_heads * p.head_dim + d] = std::numeric_limits<float>::quiet_NaN();
      p.v[size_t(j) * p.n_kv_heads * p.head_dim + d] = std::numeric_limits<float>::infinity();
    }
  }
  // Key 1 is seen by row 1 only: a huge score there changes row 1 and never row 0.
  const std::vector<float> poisoned = run_fast(p);
  EXPECT_EQ(bit_differences(clean.data(), poisoned.data(), clean.size()), 0u);
  for (float x : poisoned) ASSERT_TRUE(std::isfinite(x));
  for (int d = 0; d < p.n_kv_heads * p.head_dim; ++d) p.k[size_t(1) * p.n_kv_heads * p.head_dim + d] = 1e3f;
  const std::vector<float> boosted = run_fast(p);
  const size_t row = size_t(p.n_heads) * p.head_dim;
  EXPECT_EQ(bit_differences(clean.data(), boosted.data(), row), 0u);           // row 0 doesn't see key 1
  EXPECT_GT(bit_differences(clean.data() + row, boosted.data() + row, row), 0u);  // row 1 does
}

// A head-major cache with spare capacity, addressed by strides, gives the same bits as the row-major layout.
TEST_P(Attention, StridedHeadMajorLayoutGivesSameBits) {
  std::mt19937 rng(5);
  const int prefix = 37, nodes = 9, capacity = 64, kv_heads = 2, heads = 8, hd = 64;
  Problem p = make_problem(nodes, prefix + nodes, heads, kv_heads, hd, 17);
  tree_mask(p, prefix, random_tree(nodes, rng));
  const std::vector<float> row_major = run_fast(p);
  std::vector<float> k_hm(size_t(kv_heads) * capacity * hd, NAN), v_hm(k_hm.size(), NAN);  // [kv_heads, capacity, hd]
  for (int j = 0; j < p.n_kv; ++j)
    for (int g = 0; g < kv_heads; ++g)
      for (int d = 0; d < hd; ++d) {
        k_hm[(size_t(g) * capacity + j) * hd + d] = p.k[(size_t(j) * kv_heads + g) * hd + d];
        v_hm[(size_t(g) * capacity + j) * hd + d] = p.v[(size_t(j) * kv_heads + g) * hd + d];
      }
  std::vector<float> strided(row_major.size()), ref_strided(row_major.size()), ref_plain(row_major.size());
  attention_strided(p.q.data(), k_hm.data(), v_hm.data(), hd, int64_t(capacity) * hd, p.visible.data(),
                    strided.data(), p.n_q, p.n_kv, heads, kv_heads, hd, p.scale());
  EXPECT_EQ(bit_differences(strided.data(), row_major.data(), row_major.size()), 0u);
  ref::attention_strided(p.q.data(), k_hm.data(), v_hm.data(), hd, int64_t(capacity) * hd, p.visible.data(),
                         ref_strided.data(), p.n_q, p.n_kv, heads, kv_heads, hd, p.scale());
  ref::attention(p.q.data(), p.k.data(), p.v.data(), p.visible.data(), ref_plain.data(), p.n_q, p.n_kv, heads,
                 kv_heads, hd, p.scale());
  EXPECT_EQ(bit_differences(ref_strided.data(), ref_plain.data(), ref_plain.size()), 0u);
}

// K/V in pages (a block table): each page holds 2^shift rows of every layer as
// [layers][keys, values][kv_heads][rows][head_dim]; pages sit in memory in shuffled order, NaN past the last row.
// The same rows must give the same bits as the head-major strided call, on every variant and in the references,
// for tree masks (dense tiles and the per-row path) and random masks, f32 and bf16, pages of 16 rows and of 1.
template <typename KvT>
void expect_paged_equals_strided(const Problem& p, int shift, std::mt19937& rng) {
  auto to_kv = [](float x) {
    if constexpr (std::is_same_v<KvT, float>) return x; else return f32_to_bf16(x);
  };
  const int kv_heads = p.n_kv_heads, hd = p.head_dim, page_rows = 1 << shift, layers = 2, layer = 1;
  const int n_pages = (p.n_kv + page_rows - 1) / page_rows;
  const size_t page_elems = size_t(layers) * 2 * kv_heads * page_rows * hd;
  const int64_t head_stride = int64_t(page_rows) * hd;
  const int64_t k_offset = int64_t(layer * 2 + 0) * kv_heads * head_stride;  // this layer's keys, then its values
  const int64_t v_offset = k_offset + kv_heads * head_stride;
  std::vector<int> order(n_pages);  // page i of the table lives at slot order[i] of the pool
  for (int i = 0; i < n_pages; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  KvT nan_value = to_kv(NAN);
  std::vector<KvT> pool(page_elems * n_pages, nan_value), k_hm(size_t(kv_heads) * p.n_kv * hd),
      v_hm(k_hm.size());  // [kv_heads, n_kv, hd]
  std::vector<const KvT*> pages(n_pages);
  for (int i = 0; i < n_pages; ++i) pages[i] = pool.data() + page_elems * order[i];
  for (int j = 0; j < p.n_kv; ++j)
    for (int g = 0; g < kv_heads; ++g)
      for (int d = 0; d < hd; ++d) {
        const size_t from = (size_t(j) * kv_heads + g) * hd + d;
        const KvT k = to_kv(p.k[from]), v = to_kv(p.v[from]);
        k_hm[(size_t(g) * p.n_kv + j) * hd + d] = k, v_hm[(size_t(g) * p.n_kv + j) * hd + d] = v;
        KvT* page = const_cast<KvT*>(pages[j >> shift]);
        const size_t at = size_t(g) * head_stride + size_t(j & (page_rows - 1)) * hd + d;
        page[k_offset + at] = k, page[v_offset + at] = v;
      }
  std::vector<float> strided(p.q.size()), paged(p.q.size(), -1.0f), ref_strided(p.q.size()), ref_paged(p.q.size());
  auto strided_call = [&](auto fn, float* out) {
    fn(p.q.data(), k_hm.data(), v_hm.data(), hd, int64_t(p.n_kv) * hd, p.visible.data(), out, p.n_q, p.n_kv,
       p.n_heads, kv_heads, hd, p.scale());
  };
  if constexpr (std::is_same_v<KvT, float>) {
    strided_call(attention_strided, strided.data());
    strided_call(ref::attention_strided, ref_strided.data());
  } else {
    strided_call(attention_strided_bf16kv, strided.data());
    strided_call(ref::attention_strided_bf16kv, ref_strided.data());
  }
  attention_paged(p.q.data(), pages.data(), shift, k_offset, v_offset, head_stride, p.visible.data(), paged.data(),
                  p.n_q, p.n_kv, p.n_heads, kv_heads, hd, p.scale());
  ref::attention_paged(p.q.data(), pages.data(), shift, k_offset, v_offset, head_stride, p.visible.data(),
                       ref_paged.data(), p.n_q, p.n_kv, p.n_heads, kv_heads, hd, p.scale());
  EXPECT_EQ(bit_differences(paged.data(), strided.data(), strided.size()), 0u);
  EXPECT_EQ(bit_differences(ref_paged.data(), ref_strided.data(), strided.size()), 0u);
}

TEST_P(Attention, PagedLayoutGivesSameBitsAsStrided) {
  std::mt19937 rng(23);
  for (Shape s : {Shape{1, 1, 2, 2, 64}, Shape{9, 70, 8, 4, 64}, Shape{17, 29, 4, 2, 36}, Shape{16, 300, 16, 8, 128},
                  Shape{1, 200, 8, 4, 64}, Shape{40, 131, 6, 2, 48}}) {
    for (bool tree : {false, true}) {
      Problem p = tree_or_random_problem(s, tree, rng);
      for (int shift : {4, 0}) {
        SCOPED_TRACE(::testing::Message() << "n_q " << s.n_q << " n_kv " << s.n_kv << " tree " << tree << " shift "
                                          << shift);
        expect_paged_equals_strided<float>(p, shift, rng);
        expect_paged_equals_strided<uint16_t>(p, shift, rng);
      }
    }
  }
  Problem bad = make_problem(1, 3, 2, 2, 32, 1);
  bad.visible = {1, 1, 1};
  std::vector<float> page(size_t(2) * 2 * 4 * 32), out(bad.q.size());
  const float* pages[] = {page.data()};
  EXPECT_THROW(attention_paged(bad.q.data(), pages, 31, 0, 0, 4 * 32, bad.visible.data(), out.data(), 1, 3, 2, 2, 32,
                               0.1f),
               Error);
}

// K in tiles of 16 keys ([kv_heads][tiles][head_dim][16], the KV cache's layout) and V head-major, with NaN in the
// lanes past the last key and in the spare capacity: the same bits as the head-major strided call on every variant
// and in the references, for tree masks (dense tiles and the per-row path) and random masks, f32 and bf16.
template <typename KvT>
void expect_tiled_equals_strided(const Problem& p) {
  auto to_kv = [](float x) {
    if constexpr (std::is_same_v<KvT, float>) return x; else return f32_to_bf16(x);
  };
  const int kv_heads = p.n_kv_heads, hd = p.head_dim;
  const int64_t head_stride = int64_t((p.n_kv + 15) / 16 + 1) * 16 * hd;  // a spare tile per head
  std::vector<KvT> k_tiled(size_t(kv_heads) * head_stride, to_kv(NAN)), v_hm(k_tiled.size(), to_kv(NAN));
  std::vector<KvT> k_rows(k_tiled.size(), to_kv(NAN));  // [kv_heads, head_stride / hd, hd] head-major
  for (int j = 0; j < p.n_kv; ++j)
    for (int g = 0; g < kv_heads; ++g)
      for (int d = 0; d < hd; ++d) {
        const size_t from = (size_t(j) * kv_heads + g) * hd + d;
        k_tiled[size_t(g) * head_stride + size_t(j / 16) * 16 * hd + size_t(d) * 16 + j % 16] = to_kv(p.k[from]);
        k_rows[size_t(g) * head_stride + size_t(j) * hd + d] = to_kv(p.k[from]);
        v_hm[size_t(g) * head_stride + size_t(j) * hd + d] = to_kv(p.v[from]);
      }
  std::vector<float> strided(p.q.size()), tiled(p.q.size(), -1.0f), ref_strided(p.q.size()), ref_tiled(p.q.size());
  auto strided_call = [&](auto fn, float* out) {
    fn(p.q.data(), k_rows.data(), v_hm.data(), hd, head_stride, p.visible.data(), out, p.n_q, p.n_kv, p.n_heads,
       kv_heads, hd, p.scale());
  };
  if constexpr (std::is_same_v<KvT, float>) {
    strided_call(attention_strided, strided.data());
    strided_call(ref::attention_strided, ref_strided.data());
  } else {
    strided_call(attention_strided_bf16kv, strided.data());
    strided_call(ref::attention_strided_bf16kv, ref_strided.data());
  }
  attention_tiled(p.q.data(), k_tiled.data(), v_hm.data(), head_stride, p.visible.data(), tiled.data(), p.n_q, p.n_kv,
                  p.n_heads, kv_heads, hd, p.scale());
  const DType dtype = std::is_same_v<KvT, float> ? DType::F32 : DType::BF16;
  const KVSpan whole{k_tiled.data(), v_hm.data(), head_stride, 0};
  ref::attention_tiled(p.q.data(), &whole, 1, dtype, p.visible.data(), ref_tiled.data(), p.n_q, p.n_kv, p.n_heads,
                       kv_heads, hd, p.scale());
  EXPECT_EQ(bit_differences(tiled.data(), strided.data(), strided.size()), 0u);
  EXPECT_EQ(bit_differences(ref_tiled.data(), ref_strided.data(), strided.size()), 0u);

  // The same rows in spans of 16, 32 and 48 rows, each its own buffer with its own head stride (a spare tile of NaN
  // per head), as a prefix shared in blocks and then the sequence's own rows: the same bits again.
  std::vector<std::vector<KvT>> k_parts, v_parts;
  std::vector<KVSpan> spans;
  for (int first = 0, i = 0; first < p.n_kv; ++i) {
    const int rows = std::min(16 * (1 + i % 3), p.n_kv - first), stride = ((rows + 15) / 16 + 1) * 16 * hd;
    std::vector<KvT>& k = k_parts.emplace_back(size_t(kv_heads) * stride, to_kv(NAN));
    std::vector<KvT>& v = v_parts.emplace_back(k.size(), to_kv(NAN));
    for (int g = 0; g < kv_heads; ++g) {  // whole tiles of keys (lanes past n_kv are zero in k_tiled), rows of values
      std::copy_n(&k_tiled[size_t(g) * head_stride + size_t(first) * hd], size_t((rows + 15) / 16) * 16 * hd,
                  &k[size_t(g) * stride]);
      std::copy_n(&v_hm[size_t(g) * head_stride + size_t(first) * hd], size_t(rows) * hd, &v[size_t(g) * stride]);
    }
    spans.push_back(KVSpan{k.data(), v.data(), stride, first});
    first += rows;
  }
  std::vector<float> spanned(p.q.size(), -1.0f), ref_spanned(p.q.size());
  attention_tiled(p.q.data(), spans.data(), int(spans.size()), dtype, p.visible.data(), spanned.data(), p.n_q, p.n_kv,
                  p.n_heads, kv_heads, hd, p.scale());
  ref::attention_tiled(p.q.data(), spans.data(), int(spans.size()), dtype, p.visible.data(), ref_spanned.data(),
                       p.n_q, p.n_kv, p.n_heads, kv_heads, hd, p.scale());
  EXPECT_EQ(bit_differences(spanned.data(), strided.data(), strided.size()), 0u) << spans.size() << " spans";
  EXPECT_EQ(bit_differences(ref_spanned.data(), ref_strided.data(), strided.size()), 0u) << spans.size() << " spans";

  // A hook that writes each head's rows into a NaN-filled copy just before the kernel reads that head: called once
  // per head, and the same bits (a head read before its hook ran would read NaN).
  std::vector<KvT> k_late(k_tiled.size(), to_kv(NAN)), v_late(v_hm.size(), to_kv(NAN));
  std::vector<std::atomic<int>> calls(static_cast<size_t>(kv_heads));
  struct Late {
    const std::vector<KvT>*k_from, *v_from;
    std::vector<KvT>*k_to, *v_to;
    int64_t head_stride;
    std::vector<std::atomic<int>>* calls;
  } const late{&k_tiled, &v_hm, &k_late, &v_late, head_stride, &calls};
  const KVHeadHook hook{[](const void* ctx, int g) {
                          const Late& l = *static_cast<const Late*>(ctx);
                          const size_t at = size_t(g) * size_t(l.head_stride);
                          std::copy_n(l.k_from->data() + at, size_t(l.head_stride), l.k_to->data() + at);
                          std::copy_n(l.v_from->data() + at, size_t(l.head_stride), l.v_to->data() + at);
                          (*l.calls)[size_t(g)].fetch_add(1);
                        },
                        &late};
  const KVSpan written_late{k_late.data(), v_late.data(), head_stride, 0};
  std::vector<float> hooked(p.q.size(), -1.0f);
  attention_tiled(p.q.data(), &written_late, 1, dtype, p.visible.data(), hooked.data(), p.n_q, p.n_kv, p.n_heads,
                  kv_heads, hd, p.scale(), &hook);
  EXPECT_EQ(bit_differences(hooked.data(), strided.data(), strided.size()), 0u) << "with a hook";
  for (int g = 0; g < kv_heads; ++g) EXPECT_EQ(calls[size_t(g)].load(), 1) << "head " << g;
}

TEST_P(Attention, TiledKeysGiveSameBitsAsStrided) {
  std::mt19937 rng(29);
  for (Shape s : {Shape{1, 1, 2, 2, 64}, Shape{9, 70, 8, 4, 64}, Shape{17, 29, 4, 2, 36}, Shape{16, 300, 16, 8, 128},
                  Shape{1, 200, 8, 4, 64}, Shape{40, 131, 6, 2, 48}, Shape{3, 16, 3, 1, 8}}) {
    for (bool tree : {false, true}) {
      Problem p = tree_or_random_problem(s, tree, rng);
      SCOPED_TRACE(::testing::Message() << "n_q " << s.n_q << " n_kv " << s.n_kv << " tree " << tree);
      expect_tiled_equals_strided<float>(p);
      expect_tiled_equals_strided<uint16_t>(p);
    }
  }
  Problem bad = make_problem(1, 17, 2, 2, 32, 1);
  bad.visible.assign(17, 1);
  std::vector<float> kv(size_t(2) * 16 * 32), out(bad.q.size());  // one tile per head: too small for 17 keys
  EXPECT_THROW(attention_tiled(bad.q.data(), kv.data(), kv.data(), 16 * 32, bad.visible.data(), out.data(), 1, 17, 2,
                               2, 32, 0.1f),
               Error);
  // Spans that do not start on a tile, or not at row 0, or out of order.
  const KVSpan off_tile[2] = {{kv.data(), kv.data(), 16 * 32, 0}, {kv.data(), kv.data(), 16 * 32, 8}};
  const KVSpan late[1] = {{kv.data(), kv.data(), 16 * 32, 16}};
  for (const auto& [spans, n] : {std::pair{off_tile, 2}, std::pair{late, 1}}) {
    EXPECT_THROW(attention_tiled(bad.q.data(), spans, n, DType::F32, bad.visible.data(), out.data(), 1, 17, 2, 2, 32,
                                 0.1f),
                 Error);
  }
}

// A bf16 KV cache: every element is widened exactly on load, so the result is attention() on the widened values,
// bit for bit, on every variant (ragged head_dim tails included), and the references agree the same way; except where
// the variant takes bf16 K/V with dot products (q and p rounded to bf16): there, within the reference's bound for
// rounded operands, and not the same bits as f32 arithmetic on the widened values (so the dot products did run).
TEST_P(Attention, Bf16KeysAndValuesEqualF32AttentionOnTheWidenedValues) {
  std::mt19937 rng(11);
  for (Shape s : {Shape{1, 1, 2, 2, 64}, Shape{3, 17, 4, 4, 32}, Shape{9, 70, 8, 4, 64}, Shape{17, 29, 4, 2, 36},
                  Shape{8, 23, 2, 1, 20}, Shape{4, 9, 2, 1, 200}, Shape{16, 100, 16, 8, 128},
                  Shape{11, 150, 6, 2, 48}}) {
    for (bool tree : {false, true}) {
      Problem p = tree_or_random_problem(s, tree, rng);  // a tree: its prefix's whole key blocks take the dense tiles
      std::vector<uint16_t> k16(p.k.size()), v16(p.v.size());
      for (size_t e = 0; e < p.k.size(); ++e) {
        k16[e] = f32_to_bf16(p.k[e]), v16[e] = f32_to_bf16(p.v[e]);
        p.k[e] = bf16_to_f32(k16[e]), p.v[e] = bf16_to_f32(v16[e]);  // p now holds the widened values
      }
      const std::vector<float> widened = run_fast(p);
      std::vector<float> from_bf16(widened.size());
      attention_bf16kv(p.q.data(), k16.data(), v16.data(), p.visible.data(), from_bf16.data(), p.n_q, p.n_kv,
                       p.n_heads, p.n_kv_heads, p.head_dim, p.scale());
      if (bf16_dot_products(s.head_dim)) {
        if (s.n_kv > 1) {  // one key: out = v either way
          EXPECT_GT(bit_differences(from_bf16.data(), widened.data(), widened.size()), 0u) << "head_dim " << s.head_dim;
        }
        expect_close_to_reference(p, from_bf16, true);
      } else {
        ASSERT_EQ(bit_differences(from_bf16.data(), widened.data(), widened.size()), 0u) << "head_dim " << s.head_dim;
        expect_close_to_reference(p, from_bf16);
      }
      std::vector<float> ref_widened(widened.size()), ref_bf16(widened.size());
      ref::attention(p.q.data(), p.k.data(), p.v.data(), p.visible.data(), ref_widened.data(), p.n_q, p.n_kv,
                     p.n_heads, p.n_kv_heads, p.head_dim, p.scale());
      ref::attention_bf16kv(p.q.data(), k16.data(), v16.data(), p.visible.data(), ref_bf16.data(), p.n_q, p.n_kv,
                            p.n_heads, p.n_kv_heads, p.head_dim, p.scale());
      ASSERT_EQ(bit_differences(ref_bf16.data(), ref_widened.data(), widened.size()), 0u);
    }
  }
  Problem bad = make_problem(2, 3, 4, 2, 32, 1);
  bad.visible = {1, 0, 0, 0, 0, 0};  // row 1 sees nothing
  std::vector<uint16_t> k16(bad.k.size()), v16(bad.v.size());
  std::vector<float> out(bad.q.size());
  EXPECT_THROW(attention_bf16kv(bad.q.data(), k16.data(), v16.data(), bad.visible.data(), out.data(), 2, 3, 4, 2, 32,
                                0.1f),
               Error);
}

TEST_P(Attention, RejectsBadArguments) {
  Problem p = make_problem(2, 3, 4, 2, 32, 1);
  p.visible = {1, 0, 0, 0, 0, 0};  // row 1 sees nothing
  std::vector<float> out(p.q.size());
  EXPECT_THROW(attention(p.q.data(), p.k.data(), p.v.data(), p.visible.data(), out.data(), 2, 3, 4, 2, 32, 0.1f),
               Error);
  p.visible.assign(6, 1);
  EXPECT_THROW(attention(p.q.data(), p.k.data(), p.v.data(), p.visible.data(), out.data(), 2, 3, 4, 3, 32, 0.1f),
               Error);
}

}  // namespace
}  // namespace ts::kernels
