// Masked grouped-query attention (contract in ops.h), written once against the vector layer and compiled per ISA
// by attention_avx2.cc and attention_avx512.cc.
//
// Work is split into tasks of (KV head, block of up to 8 query rows). Inside a task the keys are walked in blocks
// of kKeyBlock: every (row, head) pair of the task uses the block while it sits in L1/L2 (key rows are
// n_kv_heads * head_dim floats apart, 1-4 KiB, which a per-pair walk over a long context would re-stream from
// L3 per pair), the two heads of a row that share a KV head share each key load, and each pair's output stays
// in registers across the block. The previous kernel (keys one at a time, dot operands queued as pointers,
// outputs accumulated through memory) spent ~50 cycles per (row, head, key).
// For each (query row i, head h) pair:
//   1. score_t = scale * dot(q, k_j) for its visible keys j ascending (t = 0, 1, ...); each dot is one FMA chain
//      of kW lanes over head_dim and reduce_add4's fixed horizontal order
//   2. p_t = exp(score_t - max), sum_p over t in kW-lane partial sums (grouping depends only on n_vis)
//   3. out = (sum_t p_t v_j) * (1 / sum_p), each element accumulated with FMAs in ascending j
// Which pairs share a task only changes the loop nesting, never a pair's arithmetic: a row of a tree batch equals
// the same row computed alone, or with only its visible keys (tests/kernels/attention_test.cc checks the bits).
// K/V rows are f32 or bf16 (KvT = float or uint16_t): bf16 elements are widened exactly to f32 on load, so the
// arithmetic after the load is the same code in both.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_math-inl.h"

namespace ts::kernels::cpu::TS_SIMD_NS {
namespace {

constexpr int kRowsPerTask = 8;

// In place: scores -> exp(scores - max); returns their sum.
TS_SIMD float exp_shifted(float* scores, int n) {
  V max_v = set1(-INFINITY);
  for (int t = 0; t < n; t += kW) max_v = max(max_v, select(tail(n - t), load_n(scores + t, n - t), max_v));
  const V max_b = set1(reduce_max(max_v));
  V sum = zero();
  for (int t = 0; t < n; t += kW) {
    const V e = select(tail(n - t), exp_approx(sub(load_n(scores + t, n - t), max_b)), zero());
    store_n(scores + t, e, n - t);
    sum = add(sum, e);
  }
  return reduce_add(sum);
}

// The first pair of a task to read a key block meets it in L3 or DRAM, a row per 4 KiB page at worst, where
// hardware prefetchers stop: it asks for the rows a few keys ahead (the pairs after it find them in cache).
constexpr int kPrefetchKeys = 8;
template <typename KvT>
inline void prefetch_row(const KvT* row, int n) {
  constexpr int kPerLine = 64 / int(sizeof(KvT));
  for (int d = 0; d < n; d += kPerLine) prefetch(row + d);
}

// Elements [0, min(n, kW)) of a K/V row widened to f32, zeros past n.
TS_SIMD inline V load_kv(const float* p, int64_t n) { return load_n(p, n); }
TS_SIMD inline V load_kv(const uint16_t* p, int64_t n) {
  if (n >= kW) return load_bf16(p);
  uint16_t part[kW] = {};  // a ragged head_dim's last vector
  for (int64_t i = 0; i < n; ++i) part[i] = p[i];
  return load_bf16(part);
}
// load_kv for a vector known to be whole (kFull: head_dim a multiple of kW, as in every real model): no length
// test per load, which the compiler could not hoist out of the key loops. bench_attention, 1 thread, Zen 4, avx2,
// bf16 K/V, best of 4 alternated runs: prefix 128 x 8 rows 190 -> 169 us, 1024 x 8 1713 -> 1556, 1024 x 32
// 6302 -> 5743. Only there: with f32 rows, or on AVX-512 (whose partial loads are one masked instruction, no
// branch), the same paths measured 4-15% slower.
template <typename KvT>
constexpr bool kWholeVectorPaths = TS_SIMD_WIDTH == 8 && std::is_same_v<KvT, uint16_t>;
template <bool kFull, typename T>
TS_SIMD inline V load_part(const T* p, int64_t n) {
  return load_kv(p, kFull ? kW : n);  // a constant kW folds load_kv's length test away
}

// Keys per block: the block's key (then value) rows of one head stay in L1/L2 while every (row, head) pair of
// the task uses them, so a long context is streamed once per task, not once per pair.
constexpr int kKeyBlock = 64;
// Output vectors held in registers per head while the keys of a block stream past (AVX-512: 64 dims).
constexpr int kAccVectors = 4;

// Scores of one or two heads (kTwo: qb used) of one row against n keys (row indices into k_head): four keys at a
// time, each dot one FMA chain of kW lanes over d followed by reduce_add4's fixed order. A key's score never
// depends on which keys share its group of four (the tail repeats the last key and drops the copies).
template <bool kTwo, bool kFull, typename KvT>
TS_SIMD void score_keys(const float* qa, const float* qb, const int* keys, int n, const KvT* k_head,
                        size_t kv_stride, int head_dim, float scale, float* sa, float* sb, bool prefetch_ahead) {
  for (int t = 0; t < n; t += 4) {
    if (prefetch_ahead)
      for (int u = t + kPrefetchKeys; u < std::min(n, t + kPrefetchKeys + 4); ++u)
        prefetch_row(k_head + size_t(keys[u]) * kv_stride, head_dim);
    const KvT* k[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) k[u] = k_head + size_t(keys[std::min(t + u, n - 1)]) * kv_stride;
    V a0 = zero(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int d = 0; d < head_dim; d += kW) {
      const int64_t left = head_dim - d;
      const V k0 = load_part<kFull>(k[0] + d, left), k1 = load_part<kFull>(k[1] + d, left),
              k2 = load_part<kFull>(k[2] + d, left), k3 = load_part<kFull>(k[3] + d, left);
      const V qad = load_part<kFull>(qa + d, left);
      a0 = fma(qad, k0, a0), a1 = fma(qad, k1, a1), a2 = fma(qad, k2, a2), a3 = fma(qad, k3, a3);
      if constexpr (kTwo) {
        const V qbd = load_part<kFull>(qb + d, left);
        b0 = fma(qbd, k0, b0), b1 = fma(qbd, k1, b1), b2 = fma(qbd, k2, b2), b3 = fma(qbd, k3, b3);
      }
    }
    const int valid = std::min(4, n - t);
    float r[4];
    reduce_add4(a0, a1, a2, a3, r);
    for (int u = 0; u < valid; ++u) sa[t + u] = r[u] * scale;
    if constexpr (kTwo) {
      reduce_add4(b0, b1, b2, b3, r);
      for (int u = 0; u < valid; ++u) sb[t + u] = r[u] * scale;
    }
  }
}

// acc_a[0, head_dim) += sum_t pa[t] v_{keys[t]} (and acc_b with pb when kTwo), one FMA per key in ascending t
// for every element; up to kAccVectors vectors per head in registers per pass over the keys.
template <bool kTwo, int kVectors, bool kFull, typename KvT>
TS_SIMD void values_pass(const float* pa, const float* pb, const int* keys, int n, const KvT* v_head,
                         size_t kv_stride, int d0, int width, float* acc_a, float* acc_b, int prefetch_width) {
  V aa[kVectors], ab[kVectors];
#pragma GCC unroll 4
  for (int a = 0; a < kVectors; ++a) {
    aa[a] = load_n(acc_a + d0 + a * kW, width - a * kW);
    if constexpr (kTwo) ab[a] = load_n(acc_b + d0 + a * kW, width - a * kW);
  }
  for (int t = 0; t < n; ++t) {
    const KvT* vj = v_head + size_t(keys[t]) * kv_stride + d0;  // [width]
    if (prefetch_width > 0 && t + kPrefetchKeys < n)
      prefetch_row(v_head + size_t(keys[t + kPrefetchKeys]) * kv_stride, prefetch_width);
    const V wa = set1(pa[t]);
    V wb = wa;
    if constexpr (kTwo) wb = set1(pb[t]);
#pragma GCC unroll 4
    for (int a = 0; a < kVectors; ++a) {
      const V v = load_part<kFull>(vj + a * kW, width - a * kW);
      aa[a] = fma(wa, v, aa[a]);
      if constexpr (kTwo) ab[a] = fma(wb, v, ab[a]);
    }
  }
#pragma GCC unroll 4
  for (int a = 0; a < kVectors; ++a) {
    store_n(acc_a + d0 + a * kW, aa[a], width - a * kW);
    if constexpr (kTwo) store_n(acc_b + d0 + a * kW, ab[a], width - a * kW);
  }
}

template <bool kTwo, typename KvT>
TS_SIMD void accumulate_values(const float* pa, const float* pb, const int* keys, int n, const KvT* v_head,
                               size_t kv_stride, int head_dim, float* acc_a, float* acc_b, bool prefetch_ahead) {
  for (int d0 = 0; d0 < head_dim; d0 += kAccVectors * kW) {
    const int width = std::min(head_dim - d0, kAccVectors * kW);
    const int pw = prefetch_ahead && d0 == 0 ? head_dim : 0;  // the first pass fetches whole rows
    if (kWholeVectorPaths<KvT> && width == kAccVectors * kW) {  // whole vectors: no length tests
      values_pass<kTwo, kAccVectors, true>(pa, pb, keys, n, v_head, kv_stride, d0, width, acc_a, acc_b, pw);
      continue;
    }
    switch ((width + kW - 1) / kW) {
      case 1: values_pass<kTwo, 1, false>(pa, pb, keys, n, v_head, kv_stride, d0, width, acc_a, acc_b, pw); break;
      case 2: values_pass<kTwo, 2, false>(pa, pb, keys, n, v_head, kv_stride, d0, width, acc_a, acc_b, pw); break;
      case 3: values_pass<kTwo, 3, false>(pa, pb, keys, n, v_head, kv_stride, d0, width, acc_a, acc_b, pw); break;
      default: values_pass<kTwo, 4, false>(pa, pb, keys, n, v_head, kv_stride, d0, width, acc_a, acc_b, pw); break;
    }
  }
}

struct TaskScratch {
  std::vector<int> keys;      // [rows in block, n_kv] visible key indices per row, ascending (first n_vis used)
  std::vector<int> n_vis;     // [rows in block]
  std::vector<int> cursor;    // [rows in block] first visible key of the current key block
  std::vector<float> acc;     // [rows in block, group, head_dim] weighted sums of values
  std::vector<float> scores;  // [rows in block, group, n_kv] scores, then unnormalised probabilities
  std::vector<float> inv_sum; // [rows in block, group] 1 / softmax normaliser
};

// One task: KV head kvh, query rows [row0, row0 + rows). k_head/v_head: key/value row 0 of head kvh, rows
// kv_stride elements apart. Returns false if a row sees no key.
template <typename KvT>
TS_SIMD bool attend_block(const float* q, const KvT* k_head, const KvT* v_head, size_t kv_stride,
                          const uint8_t* visible, float* out, int row0, int rows, int kvh, int n_kv, int n_heads,
                          int n_kv_heads, int head_dim, float scale, TaskScratch& s) {
  const int group = n_heads / n_kv_heads;
  s.keys.resize(size_t(rows) * n_kv);
  s.n_vis.assign(rows, 0);
  for (int i = 0; i < rows; ++i) {
    const uint8_t* row_mask = visible + size_t(row0 + i) * n_kv;  // [n_kv]
    int* keys = s.keys.data() + size_t(i) * n_kv;
    int n = 0;
    for (int j = 0; j < n_kv; ++j) {
      keys[n] = j;
      n += row_mask[j] != 0;
    }
    if (n == 0) return false;
    s.n_vis[i] = n;
  }
  s.scores.resize(size_t(rows) * group * n_kv);
  s.acc.assign(size_t(rows) * group * head_dim, 0.0f);
  auto acc_of = [&](int i, int g) { return s.acc.data() + (size_t(i) * group + g) * head_dim; };
  auto q_of = [&](int i, int g) { return q + (size_t(row0 + i) * n_heads + size_t(kvh) * group + g) * head_dim; };
  auto scores_of = [&](int i, int g) { return s.scores.data() + (size_t(i) * group + g) * n_kv; };
  auto keys_of = [&](int i) { return s.keys.data() + size_t(i) * n_kv; };

  // Visible keys of row i inside key block [j0, j1): [cursor, end) of its list; advances the cursor.
  auto block_range = [&](int i, int j1, int& t0, int& t1) {
    t0 = s.cursor[i];
    t1 = t0;
    const int* keys = keys_of(i);
    while (t1 < s.n_vis[i] && keys[t1] < j1) ++t1;
    s.cursor[i] = t1;
  };
  const bool whole_vectors = kWholeVectorPaths<KvT> && head_dim % kW == 0;
  // 1. Scores, key block by key block, heads two at a time (they share the key loads).
  s.cursor.assign(rows, 0);
  for (int j0 = 0; j0 < n_kv; j0 += kKeyBlock) {
    const int j1 = std::min(n_kv, j0 + kKeyBlock);
    for (int i = 0; i < rows; ++i) {
      int t0, t1;
      block_range(i, j1, t0, t1);
      if (t1 == t0) continue;
      const int* keys = keys_of(i) + t0;
      int g = 0;
      for (; g + 2 <= group; g += 2) {
        float* sa = scores_of(i, g) + t0;
        float* sb = scores_of(i, g + 1) + t0;
        if (whole_vectors)
          score_keys<true, true>(q_of(i, g), q_of(i, g + 1), keys, t1 - t0, k_head, kv_stride, head_dim, scale, sa, sb,
                                 i == 0 && g == 0);
        else
          score_keys<true, false>(q_of(i, g), q_of(i, g + 1), keys, t1 - t0, k_head, kv_stride, head_dim, scale, sa,
                                  sb, i == 0 && g == 0);
      }
      if (g < group) {
        float* sa = scores_of(i, g) + t0;
        if (whole_vectors)
          score_keys<false, true>(q_of(i, g), nullptr, keys, t1 - t0, k_head, kv_stride, head_dim, scale, sa,
                                  nullptr, i == 0 && g == 0);
        else
          score_keys<false, false>(q_of(i, g), nullptr, keys, t1 - t0, k_head, kv_stride, head_dim, scale, sa,
                                   nullptr, i == 0 && g == 0);
      }
    }
  }
  // 2. Softmax numerators and normalisers.
  s.inv_sum.resize(size_t(rows) * group);
  for (int i = 0; i < rows; ++i)
    for (int g = 0; g < group; ++g)
      s.inv_sum[size_t(i) * group + g] = 1.0f / exp_shifted(scores_of(i, g), s.n_vis[i]);
  // 3. Weighted sums of values, key block by key block again.
  s.cursor.assign(rows, 0);
  for (int j0 = 0; j0 < n_kv; j0 += kKeyBlock) {
    const int j1 = std::min(n_kv, j0 + kKeyBlock);
    for (int i = 0; i < rows; ++i) {
      int t0, t1;
      block_range(i, j1, t0, t1);
      if (t1 == t0) continue;
      const int* keys = keys_of(i) + t0;
      int g = 0;
      for (; g + 2 <= group; g += 2)
        accumulate_values<true>(scores_of(i, g) + t0, scores_of(i, g + 1) + t0, keys, t1 - t0, v_head, kv_stride,
                                head_dim, acc_of(i, g), acc_of(i, g + 1), i == 0 && g == 0);
      if (g < group)
        accumulate_values<false>(scores_of(i, g) + t0, nullptr, keys, t1 - t0, v_head, kv_stride, head_dim,
                                 acc_of(i, g), nullptr, i == 0 && g == 0);
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int g = 0; g < group; ++g) {
      float* oh = out + (size_t(row0 + i) * n_heads + size_t(kvh) * group + g) * head_dim;  // [head_dim]
      const float* a = acc_of(i, g);
      const V inv = set1(s.inv_sum[size_t(i) * group + g]);
      for (int d = 0; d < head_dim; d += kW) store_n(oh + d, mul(load_n(a + d, head_dim - d), inv), head_dim - d);
    }
  return true;
}

template <typename KvT>
bool attention_kv(const float* q, const KvT* k, const KvT* v, int64_t kv_row_stride, int64_t kv_head_stride,
                  const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
                  float scale) {
  const int blocks = (n_q + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t tasks = int64_t(blocks) * n_kv_heads;
  std::atomic<bool> all_rows_see_a_key{true};
  // Work of the whole call ~ 2 n_q n_heads n_kv head_dim multiply-adds; go parallel only above ~256k of them (tens
  // of microseconds), well past the ~5 us a hand-off costs.
  parallel_tasks(tasks, int64_t(n_q) * n_heads * n_kv * head_dim >= (1 << 17), [&](int64_t task) {
    thread_local TaskScratch scratch;
    const int block = int(task / n_kv_heads), kvh = int(task % n_kv_heads);
    const int row0 = block * kRowsPerTask, rows = std::min(kRowsPerTask, n_q - row0);
    const size_t head_offset = size_t(kvh) * size_t(kv_head_stride);
    if (!attend_block(q, k + head_offset, v + head_offset, size_t(kv_row_stride), visible, out, row0, rows, kvh, n_kv,
                      n_heads, n_kv_heads, head_dim, scale, scratch))
      all_rows_see_a_key.store(false, std::memory_order_relaxed);
  });
  return all_rows_see_a_key;
}

}  // namespace

// Returns false if some query row sees no key (the caller reports it). K/V in f32, or bf16 bits.
bool attention(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
               const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
               float scale) {
  return attention_kv(q, k, v, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim,
                      scale);
}
bool attention(const float* q, const uint16_t* k_bf16, const uint16_t* v_bf16, int64_t kv_row_stride,
               int64_t kv_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
               int n_kv_heads, int head_dim, float scale) {
  return attention_kv(q, k_bf16, v_bf16, kv_row_stride, kv_head_stride, visible, out, n_q, n_kv, n_heads, n_kv_heads,
                      head_dim, scale);
}

}  // namespace ts::kernels::cpu::TS_SIMD_NS
