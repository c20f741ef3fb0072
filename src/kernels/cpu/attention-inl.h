// Masked grouped-query attention (contract in ops.h), written once against the vector layer and compiled per ISA
// by attention_avx2.cc and attention_avx512.cc.
//
// Work is split into tasks of (KV head, block of up to 8 query rows), so each key row is read once per task and
// used by every (row, head) pair of the block that sees it (in the [n_kv, n_kv_heads, head_dim] layout the rows
// of a head sit n_kv_heads * head_dim floats apart, 4 KiB for Qwen3-0.6B; reading them once per query head made
// long contexts memory-bound). attention_strided lets a head-major cache make them contiguous.
// For each (query row i, head h) pair:
//   1. score_t = scale * dot(q, k_j) for its visible keys j ascending (t = 0, 1, ...); each dot is one FMA chain
//      of kW lanes over head_dim and a fixed horizontal sum
//   2. p_t = exp(score_t - max), sum_p over t in kW-lane partial sums (grouping depends only on n_vis)
//   3. out = (sum_t p_t v_j) * (1 / sum_p), each element accumulated with FMAs in ascending j (key-major too)
// Which pairs share a task only changes the loop nesting, never a pair's arithmetic: a row of a tree batch equals
// the same row computed alone, or with only its visible keys (tests/kernels/attention_test.cc checks the bits).
#include <algorithm>
#include <atomic>
#include <cmath>
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

// Key rows are 4 KiB apart (one page each), where hardware prefetchers stop; ask for a row a few keys ahead
// (measured: ~10% at 1k keys, ~20% at 4k).
constexpr int kPrefetchKeys = 6;
inline void prefetch_row(const float* row, int n) {
  for (int d = 0; d < n; d += 16) prefetch(row + d);  // one cache line per 16 floats
}

// acc[0, n) += p * v[0, n). Full vectors use unmasked loads/stores: the next key's update of the same acc must
// get the value by store forwarding, which masked stores defeat (measured on AVX-512: the kernel then stalled).
TS_SIMD inline void axpy(float p, const float* v, float* acc, int n) {
  const V pv = set1(p);
  for (int d = 0; d < n; d += kW) store_n(acc + d, fma(pv, load_n(v + d, n - d), load_n(acc + d, n - d)), n - d);
}

// Four independent dot products, each with exactly the arithmetic of dot_f32 (one FMA chain, fixed horizontal
// sum): batching them only lets the chains overlap.
TS_SIMD inline void dot4(const float* const* a, const float* const* b, int n, float scale, float* const* out) {
  V c0 = zero(), c1 = c0, c2 = c0, c3 = c0;
  for (int d = 0; d < n; d += kW) {
    const int64_t left = n - d;
    c0 = fma(load_n(a[0] + d, left), load_n(b[0] + d, left), c0);
    c1 = fma(load_n(a[1] + d, left), load_n(b[1] + d, left), c1);
    c2 = fma(load_n(a[2] + d, left), load_n(b[2] + d, left), c2);
    c3 = fma(load_n(a[3] + d, left), load_n(b[3] + d, left), c3);
  }
  *out[0] = reduce_add(c0) * scale;
  *out[1] = reduce_add(c1) * scale;
  *out[2] = reduce_add(c2) * scale;
  *out[3] = reduce_add(c3) * scale;
}

constexpr int kKeysPerBatch = 8;

struct TaskScratch {
  std::vector<int> n_vis;     // [rows in block] visible keys per row
  std::vector<int> next;      // [rows in block] running index t per row
  std::vector<float> acc;     // [rows in block, group, head_dim] weighted sums of values
  std::vector<float> scores;  // [rows in block, group, n_kv] scores, then unnormalised probabilities
  std::vector<const float*> dot_q, dot_k;  // [pending dots] operands of the scores still to compute
  std::vector<float*> dot_out;             // [pending dots] where each score goes
  std::vector<float> inv_sum;              // [rows in block, group] 1 / softmax normaliser
};

// One task: KV head kvh, query rows [row0, row0 + rows). k_head/v_head: key/value row 0 of head kvh, rows
// kv_stride floats apart. Returns false if a row sees no key.
TS_SIMD bool attend_block(const float* q, const float* k_head, const float* v_head, size_t kv_stride,
                                const uint8_t* visible, float* out, int row0, int rows, int kvh, int n_kv, int n_heads,
                                int n_kv_heads, int head_dim, float scale, TaskScratch& s) {
  const int group = n_heads / n_kv_heads;
  s.n_vis.assign(rows, 0);
  for (int i = 0; i < rows; ++i) {
    const uint8_t* row_mask = visible + size_t(row0 + i) * n_kv;  // [n_kv]
    for (int j = 0; j < n_kv; ++j) s.n_vis[i] += row_mask[j] != 0;
    if (s.n_vis[i] == 0) return false;
  }
  s.scores.resize(size_t(rows) * group * n_kv);
  s.acc.assign(size_t(rows) * group * head_dim, 0.0f);
  auto acc_of = [&](int i, int g) { return s.acc.data() + (size_t(i) * group + g) * head_dim; };
  auto q_of = [&](int i, int g) { return q + (size_t(row0 + i) * n_heads + size_t(kvh) * group + g) * head_dim; };
  auto scores_of = [&](int i, int g) { return s.scores.data() + (size_t(i) * group + g) * n_kv; };

  // 1. Scores, key-major so each key row is loaded once for all pairs; the dots of a batch of keys are queued
  //    and run four at a time.
  s.next.assign(rows, 0);
  auto flush = [&] {
    size_t n = s.dot_q.size(), d = 0;
    for (; d + 4 <= n; d += 4) dot4(&s.dot_q[d], &s.dot_k[d], head_dim, scale, &s.dot_out[d]);
    for (; d < n; ++d) *s.dot_out[d] = dot_f32(s.dot_q[d], s.dot_k[d], head_dim) * scale;
    s.dot_q.clear(), s.dot_k.clear(), s.dot_out.clear();
  };
  for (int j = 0; j < n_kv; ++j) {
    const float* kj = k_head + j * kv_stride;  // [head_dim]
    if (j + kPrefetchKeys < n_kv) prefetch_row(kj + kPrefetchKeys * kv_stride, head_dim);
    for (int i = 0; i < rows; ++i) {
      if (!visible[size_t(row0 + i) * n_kv + j]) continue;
      const int t = s.next[i]++;
      for (int g = 0; g < group; ++g) {
        s.dot_q.push_back(q_of(i, g));
        s.dot_k.push_back(kj);
        s.dot_out.push_back(scores_of(i, g) + t);
      }
    }
    if (j % kKeysPerBatch == kKeysPerBatch - 1) flush();
  }
  flush();
  // 2. Softmax numerators and normalisers.
  std::vector<float>& inv_sum = s.inv_sum;  // [rows in block, group]
  inv_sum.resize(size_t(rows) * group);
  for (int i = 0; i < rows; ++i)
    for (int g = 0; g < group; ++g) inv_sum[size_t(i) * group + g] = 1.0f / exp_shifted(scores_of(i, g), s.n_vis[i]);
  // 3. Weighted sums of values, key-major again (each value row read once per task), ascending j for every pair.
  s.next.assign(rows, 0);
  for (int j = 0; j < n_kv; ++j) {
    const float* vj = v_head + j * kv_stride;  // [head_dim]
    if (j + kPrefetchKeys < n_kv) prefetch_row(vj + kPrefetchKeys * kv_stride, head_dim);
    for (int i = 0; i < rows; ++i) {
      if (!visible[size_t(row0 + i) * n_kv + j]) continue;
      const int t = s.next[i]++;
      for (int g = 0; g < group; ++g) axpy(scores_of(i, g)[t], vj, acc_of(i, g), head_dim);
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int g = 0; g < group; ++g) {
      float* oh = out + (size_t(row0 + i) * n_heads + size_t(kvh) * group + g) * head_dim;  // [head_dim]
      const float* a = acc_of(i, g);
      const V inv = set1(inv_sum[size_t(i) * group + g]);
      for (int d = 0; d < head_dim; d += kW) store_n(oh + d, mul(load_n(a + d, head_dim - d), inv), head_dim - d);
    }
  return true;
}

}  // namespace

// Returns false if some query row sees no key (the caller reports it).
bool attention(const float* q, const float* k, const float* v, int64_t kv_row_stride, int64_t kv_head_stride,
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

}  // namespace ts::kernels::cpu::TS_SIMD_NS
