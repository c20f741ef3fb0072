// Masked grouped-query attention (contract in ops.h), written once against the vector layer and compiled per ISA
// by attention_avx2.cc and attention_avx512.cc.
//
// Work is split into tasks of (KV head, block of up to 16 query rows: rows_per_task). Inside a task the keys are
// walked in blocks of kKeyBlock: every (row, head) pair of the task uses the block while it sits in L1/L2, and each
// pair's output stays in registers across the block (docs/results/optimization-notes.md, "Attention: key blocks"). A
// key block that a row sees whole (all of the cached prefix, for every row of a tree) goes to register tiles over the
// pairs of all such rows: each key tile or value vector is loaded and widened once for up to 8 pairs (score_tile,
// values_tile), not once per row (docs/results/optimization-notes.md, "Attention: dense register tiles"). A row that
// sees only part of a block (a tree's own nodes) scores the whole block and keeps its visible keys, and sums values
// over its visible keys alone (accumulate_values).
// Scores keep keys in vector lanes: keys are read as tiles of 16 keys, [head_dim][16], one FMA per dimension for 16
// keys and no horizontal sums (docs/benchmarks.md, "bench_qk_layouts": twice the rate of per-key dot products). The
// KV cache stores K that way (attention_tiled); row-major keys are copied into tiles per block first.
// For each (query row i, head h) pair:
//   1. score_t = scale * dot(q, k_j) for its visible keys j ascending (t = 0, 1, ...); each dot is one FMA chain
//      over d = 0, 1, ..., head_dim - 1 in the key's own lane, so a key's score never depends on its neighbours
//   2. p_t = exp(score_t - max), sum_p over t in kW-lane partial sums (grouping depends only on n_vis)
//   3. out = (sum_t p_t v_j) * (1 / sum_p), each element accumulated with FMAs in ascending j
// Which pairs share a task only changes the loop nesting, never a pair's arithmetic: a row of a tree batch equals
// the same row computed alone, or with only its visible keys (tests/kernels/attention_test.cc checks the bits).
// K/V rows are f32 or bf16 (KvT = float or uint16_t): bf16 elements are widened exactly to f32 on load, so the
// arithmetic after the load is the same code in both. Rows are found through row-address policies
// (attention_rows-inl.h): values from one base and a stride (attention()) or a table of pages (attention_paged(), and
// the cache's spans as 16-row tiles), keys as tiles read in place or transposed from rows; the paths are the same
// code, so equal rows give equal bits either way.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_math-inl.h"
#include "kernels/kv_span.h"

namespace ts::kernels::cpu::TS_SIMD_NS {
namespace {

// Query rows per task: on AVX-512, 16 while that still leaves a task per pool thread, else 8. Each task streams its KV
// head's keys and values once, so 8-row tasks read every head's K/V twice for a 16-row verify. On AVX2 the same change
// was slower (its tiles are smaller and the larger score scratch crowds L1), so it stays 8
// (docs/results/optimization-notes.md, "Attention: 16 query rows per task on AVX-512").
constexpr int kRowsPerTask = TS_SIMD_WIDTH == 16 ? 16 : 8, kRowsPerSmallTask = 8;
inline int rows_per_task(int n_q, int n_kv_heads) {
  const int64_t big_tasks = int64_t(n_kv_heads) * ((n_q + kRowsPerTask - 1) / kRowsPerTask);
  return big_tasks >= pool_threads() ? kRowsPerTask : kRowsPerSmallTask;
}

// The softmax numerators as they are (Round for exp_shifted; the bf16 dot products round them: attention_dot-inl.h).
struct KeepF32 {
  TS_SIMD V exp(V x) const { return exp_approx(x); }
  TS_SIMD V operator()(V e) const { return e; }
};

// In place: scores -> round(exp(scores - max)); returns their sum.
template <typename Round = KeepF32>
TS_SIMD float exp_shifted(float* scores, int n, Round round = {}) {
  V max_v = set1(-INFINITY);
  for (int t = 0; t < n; t += kW) max_v = max(max_v, select(tail(n - t), load_n(scores + t, n - t), max_v));
  const V max_b = set1(reduce_max(max_v));
  V sum = zero();
  for (int t = 0; t < n; t += kW) {
    const V e = select(tail(n - t), round(round.exp(sub(load_n(scores + t, n - t), max_b))), zero());
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
TS_SIMD inline V load_kv(const uint16_t* p, int64_t n) { return load_bf16_n(p, n); }
// load_kv for a vector known to be whole (kFull: head_dim a multiple of kW, as in every real model): no length test per
// load, which the compiler could not hoist out of the key loops. Only with bf16 rows on avx2, where it is faster: with
// f32 rows, or on AVX-512 (whose partial loads are one masked instruction, no branch), the same paths were slower. (The
// dense tiles below load whole vectors on every ISA: there they are no slower.) docs/results/optimization-notes.md,
// "Attention (avx2, bf16 K/V): whole-vector paths".
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

// acc_a[0, head_dim) += sum_t pa[t] v_{keys[t]} (and acc_b with pb when kTwo), one FMA per key in ascending t
// for every element; up to kAccVectors vectors per head in registers per pass over the keys.
template <bool kTwo, int kVectors, bool kFull, typename Rows>
TS_SIMD void values_pass(const float* pa, const float* pb, const int* keys, int n, const Rows& v_rows, int d0,
                         int width, float* acc_a, float* acc_b, int prefetch_width) {
  using KvT = typename Rows::Elem;
  V aa[kVectors], ab[kVectors];
#pragma GCC unroll 4
  for (int a = 0; a < kVectors; ++a) {
    aa[a] = load_n(acc_a + d0 + a * kW, width - a * kW);
    if constexpr (kTwo) ab[a] = load_n(acc_b + d0 + a * kW, width - a * kW);
  }
  for (int t = 0; t < n; ++t) {
    const KvT* vj = v_rows(keys[t]) + d0;  // [width]
    if (prefetch_width > 0 && t + kPrefetchKeys < n) prefetch_row(v_rows(keys[t + kPrefetchKeys]), prefetch_width);
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

template <bool kTwo, typename Rows>
TS_SIMD void accumulate_values(const float* pa, const float* pb, const int* keys, int n, const Rows& v_rows,
                               int head_dim, float* acc_a, float* acc_b, bool prefetch_ahead) {
  using KvT = typename Rows::Elem;
  for (int d0 = 0; d0 < head_dim; d0 += kAccVectors * kW) {
    const int width = std::min(head_dim - d0, kAccVectors * kW);
    const int pw = prefetch_ahead && d0 == 0 ? head_dim : 0;  // the first pass fetches whole rows
    if (kWholeVectorPaths<KvT> && width == kAccVectors * kW) {  // whole vectors: no length tests
      values_pass<kTwo, kAccVectors, true>(pa, pb, keys, n, v_rows, d0, width, acc_a, acc_b, pw);
      continue;
    }
    switch ((width + kW - 1) / kW) {
      case 1: values_pass<kTwo, 1, false>(pa, pb, keys, n, v_rows, d0, width, acc_a, acc_b, pw); break;
      case 2: values_pass<kTwo, 2, false>(pa, pb, keys, n, v_rows, d0, width, acc_a, acc_b, pw); break;
      case 3: values_pass<kTwo, 3, false>(pa, pb, keys, n, v_rows, d0, width, acc_a, acc_b, pw); break;
      default: values_pass<kTwo, 4, false>(pa, pb, keys, n, v_rows, d0, width, acc_a, acc_b, pw); break;
    }
  }
}

// Dense tiles for the rows that see a whole key block (every row of a task sees the whole cached prefix, so all
// but the tree's last block). Scores keep keys in vector lanes: a key tile holds 16 keys of one head as
// [head_dim][16] (KeyTiles below), and a pass takes kQ (row, head) pairs x kT tiles, one accumulator vector per
// pair and tile part, q[x][d] broadcast, one FMA per d. Every score is one FMA chain over d = 0, 1, ... in its own
// lane, with no horizontal sum, so it does not depend on the lanes beside it: a row's scores are the same bits in a
// tile pass, in the per-row path, alone or in any batch, and on every vector width. Values take kQ pairs x kVectors
// output vectors per pass, one FMA per key in ascending order (docs/results/optimization-notes.md, "Attention
// (avx512): 4 value vectors per pass" and "Attention (avx2): 6 pairs per tile").
#if TS_SIMD_WIDTH == 16
constexpr int kScoreQueries = 8;  // 1-8 pairs x 1 tile: up to 8 accumulators of 32 zmm
constexpr int kValueQueries = 4;  // x 4 vectors: 16 accumulators + 4 values
constexpr int value_vectors_per_pass(int) { return 4; }  // 2 x 8 (a 128-dim head in one pass) was slower
#else
// A tile is two ymm vectors: 6 pairs x 1 tile, 12 accumulators of 16 ymm.
constexpr int kScoreQueries = 6;
// 6 pairs per value tile, not 4: each value vector is widened once per 6 pairs, and 12 accumulators hide the FMA
// latency where 8 did not. The same on AVX-512 (6 x 4, 8 x 3) was no faster.
constexpr int kValueQueries = 6;  // 3-6 pairs x 2 vectors: 12 accumulators + 2 values + 1 weight
constexpr int value_vectors_per_pass(int q) { return q <= 2 ? 4 : 2; }
#endif
constexpr int kTileKeys = 16;                      // keys per key tile
constexpr int kVectorsPerTile = kTileKeys / kW;    // 1 (AVX-512) or 2 (AVX2)

TS_SIMD inline V load_tile_vector(const float* p) { return loadu(p); }
TS_SIMD inline V load_tile_vector(const uint16_t* p) { return load_bf16(p); }

// s[x][j - j0] = scale * acc[x][v] lane (j - tb) % kW of vector v, for the keys j of the kV vectors (keys tb, tb + 1,
// ...) inside [j0, j1).
template <int kQ, int kV>
TS_SIMD inline void store_scores(const V (&acc)[kQ][kV], float* const* s, int tb, int j0, int j1, float scale) {
  const V scale_v = set1(scale);
#pragma GCC unroll 4
  for (int v = 0; v < kV; ++v) {
    const int key0 = tb + v * kW;  // the key in lane 0 of vector v
    const int lo = std::max(j0 - key0, 0), hi = std::min(j1 - key0, kW);
    if (hi <= lo) continue;
#pragma GCC unroll 8
    for (int x = 0; x < kQ; ++x) {
      const V r = mul(acc[x][v], scale_v);
      if (lo == 0 && hi == kW) {
        storeu(s[x] + (key0 - j0), r);
      } else {
        alignas(64) float lanes[kW];
        storeu(lanes, r);
        for (int u = lo; u < hi; ++u) s[x][key0 - j0 + u] = lanes[u];
      }
    }
  }
}

// Scores of pairs q[0, kQ) against the kT key tiles tiles[0, kT) (keys [tb, tb + 16 kT) of the head, each
// [head_dim][16] of KvT): s[x][j - j0] = scale * (q[x] . k_j) for the keys j of the tiles inside [j0, j1).
template <int kQ, int kT, typename KvT>
TS_SIMD void score_tile(const float* const* q, float* const* s, const KvT* const* tiles, int tb, int j0, int j1,
                        int head_dim, float scale) {
  constexpr int kV = kT * kVectorsPerTile;
  V acc[kQ][kV];
#pragma GCC unroll 8
  for (int x = 0; x < kQ; ++x)
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) acc[x][v] = zero();
  const KvT* tile[kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) tile[t] = tiles[t];
  for (int d = 0; d < head_dim; ++d) {
    V k[kV];
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v)
      k[v] = load_tile_vector(tile[v / kVectorsPerTile] + size_t(d) * kTileKeys + (v % kVectorsPerTile) * kW);
#pragma GCC unroll 8
    for (int x = 0; x < kQ; ++x) {
      const V qd = set1(q[x][d]);
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) acc[x][v] = fma(qd, k[v], acc[x][v]);
    }
  }
  store_scores<kQ, kV>(acc, s, tb, j0, j1, scale);
}

// acc[x][d0, d0 + width) += sum_t p[x][t] v_{j0 + t}, one FMA per key in ascending t for every element.
template <int kQ, int kVectors, bool kFull, typename Rows>
TS_SIMD void values_tile(const float* const* p, float* const* acc, int j0, int n, const Rows& v_rows, int d0, int width,
                         int prefetch_width) {
  using KvT = typename Rows::Elem;
  V a[kQ][kVectors];
#pragma GCC unroll 6
  for (int x = 0; x < kQ; ++x)
#pragma GCC unroll 4
    for (int y = 0; y < kVectors; ++y) a[x][y] = load_n(acc[x] + d0 + y * kW, width - y * kW);
  const KvT* row = nullptr;  // value row j0 + t, looked up once per run (page) of rows
  for (int t = 0, left = 0; t < n; ++t, --left) {
    if (left == 0) {
      row = v_rows(j0 + t);
      left = v_rows.run(j0 + t);
    } else {
      row += v_rows.stride;
    }
    const KvT* vj = row + d0;  // [width]
    if (prefetch_width > 0 && t + kPrefetchKeys < n) prefetch_row(v_rows(j0 + t + kPrefetchKeys), prefetch_width);
    V v[kVectors];
#pragma GCC unroll 4
    for (int y = 0; y < kVectors; ++y) v[y] = load_part<kFull>(vj + y * kW, width - y * kW);
#pragma GCC unroll 6
    for (int x = 0; x < kQ; ++x) {
      const V w = set1(p[x][t]);
#pragma GCC unroll 4
      for (int y = 0; y < kVectors; ++y) a[x][y] = fma(w, v[y], a[x][y]);
    }
  }
#pragma GCC unroll 6
  for (int x = 0; x < kQ; ++x)
#pragma GCC unroll 4
    for (int y = 0; y < kVectors; ++y) store_n(acc[x] + d0 + y * kW, a[x][y], width - y * kW);
}

// f(std::integral_constant<int, m>{}) for a run-time m in [1, kMax]: the tile templates' query counts.
template <int kMax, typename F>
inline void with_count(int m, F&& f) {
  if constexpr (kMax > 1)
    if (m < kMax) return with_count<kMax - 1>(m, f);
  f(std::integral_constant<int, kMax>{});
}

// score_tile as score_block's policy (the bf16 dot products have another: DotScores, attention_dot-inl.h).
struct FmaScores {
  template <int kQ, int kT, typename KvT>
  TS_SIMD static void tile(const float* const* q, float* const* s, const KvT* const* tiles, int tb, int j0, int j1,
                           int head_dim, float scale) {
    score_tile<kQ, kT>(q, s, tiles, tb, j0, j1, head_dim, scale);
  }
};

// Scores of `pairs` pairs against keys [j0, j1) (one key block): s[x][j - j0]. q: the pairs' queries as the policy
// takes them; tiles: the block's key tiles from key tb0 = j0 rounded down to a tile, [ceil((j1 - tb0) / 16)] tiles
// of [head_dim][16].
// Every pass reads one tile: the head's tiles are then one forward stream, which the hardware prefetchers follow
// from DRAM. Two tiles side by side (2 KiB apart, two short streams) made the 2-3 rows of a small tree's verify
// 1.3-1.6x slower from DRAM on the Zen 4 with AVX-512 (over 300-900 cached keys) and were no faster from cache; with
// AVX2 a 3-query-head group's decode row was 1.2-1.4x slower even from cache (12 accumulators and 4 key vectors
// filled the 16 ymm registers) (docs/results/optimization-notes.md, "Attention: one key tile per score pass").
template <typename Scores, typename QueryT, typename KvT>
TS_SIMD void score_block(const QueryT* const* q, float* const* s, int pairs, int j0, int j1, const KvT* const* tiles,
                         int head_dim, float scale) {
  const int tb0 = j0 & ~(kTileKeys - 1), n_tiles = (j1 - tb0 + kTileKeys - 1) / kTileKeys;
  for (int x = 0; x < pairs; x += kScoreQueries) {
    with_count<kScoreQueries>(std::min(kScoreQueries, pairs - x), [&](auto m) {
      constexpr int kQ = decltype(m)::value;
      for (int t = 0; t < n_tiles; ++t)
        Scores::template tile<kQ, 1>(q + x, s + x, tiles + t, tb0 + t * kTileKeys, j0, j1, head_dim, scale);
    });
  }
}

template <bool kFull, typename Rows>
TS_SIMD void values_dense(const float* const* p, float* const* acc, int pairs, int j0, int n, const Rows& v_rows,
                          int head_dim, bool prefetch) {
  for (int x = 0; x < pairs; x += kValueQueries) {
    with_count<kValueQueries>(std::min(kValueQueries, pairs - x), [&](auto m) {
      constexpr int kQ = decltype(m)::value, kVectors = value_vectors_per_pass(kQ), kSpan = kVectors * kW;
      for (int d0 = 0; d0 < head_dim; d0 += kSpan) {
        const int width = std::min(head_dim - d0, kSpan);
        const int pw = prefetch && x == 0 && d0 == 0 ? head_dim : 0;  // the first pass fetches whole rows ahead
        if (kFull && width == kSpan)  // whole vectors: no length tests
          values_tile<kQ, kVectors, true>(p + x, acc + x, j0, n, v_rows, d0, width, pw);
        else  // a ragged last span: vectors past width load zeros and store nothing
          values_tile<kQ, kVectors, false>(p + x, acc + x, j0, n, v_rows, d0, width, pw);
      }
    });
  }
}

#ifdef TS_ATTENTION_BF16_DOT
#include "kernels/cpu/attention_dot-inl.h"
#else
template <typename KvT>
constexpr bool kDotProducts = false;  // only the avx512bf16 build has them
struct DotScores;                     // named by the calls under `if constexpr (kDot)`, never instantiated here
struct RoundToBf16;
#endif

#include "kernels/cpu/attention_rows-inl.h"

template <typename KvT>
struct TaskScratch {
  std::vector<int> cursor;    // [rows in block] first visible key of the current key block
  std::vector<float> acc;     // [rows in block, group, head_dim] weighted sums of values
  std::vector<float> scores;  // [rows in block, group, n_kv] scores, then unnormalised probabilities
  std::vector<float> inv_sum; // [rows in block, group] 1 / softmax normaliser
  std::vector<int> first;     // [rows in block] this key block's first list index (the block: [first, cursor))
  std::vector<const float*> dense_q;  // [dense pairs] query vectors of the block's dense (row, head) pairs
  std::vector<float*> dense_s;        // [dense pairs] their scores (then probabilities) at the block's first key
  std::vector<float*> dense_acc;      // [dense pairs] their value sums
  std::vector<KvT> k_tiles;           // [tiles of the block, head_dim, 16] row-major keys transposed (TransposedKeys)
  std::vector<const KvT*> k_tile_ptrs;  // [tiles of the block] their addresses
  std::vector<float> row_scores;      // [partial pairs, kKeyBlock] the per-row path: the scores over a whole block
                                      // of the pairs of the rows that see part of it
  std::vector<const float*> row_q;    // [partial pairs] their query vectors
  std::vector<float*> row_s;          // [partial pairs] their rows of row_scores
  std::vector<uint8_t> dense_row;     // [rows in block] 1 where the row's pairs went to the dense tiles this block
  // The bf16 dot products (attention_dot-inl.h) only:
  std::vector<uint32_t> q2;               // [rows in block, group, head_dim / 2] queries as bf16 pairs
  std::vector<const uint32_t*> dense_q2;  // [dense pairs] their rows of q2
  std::vector<const uint32_t*> row_q2;    // [partial pairs] the per-row path's
};

// Visible key indices of every query row, ascending: keys [n_q, n_kv] (first n_vis[i] of row i used), and runs [n_q]:
// keys [0, runs[i]) are all visible to row i. Built once per call (every KV head's tasks read them). Returns false if
// a row sees no key.
inline bool list_visible_keys(const uint8_t* visible, int n_q, int n_kv, std::vector<int>& keys,
                              std::vector<int>& n_vis, std::vector<int>& runs) {
  keys.resize(size_t(n_q) * n_kv);
  n_vis.resize(n_q);
  runs.resize(n_q);
  for (int i = 0; i < n_q; ++i) {
    const uint8_t* row_mask = visible + size_t(i) * n_kv;  // [n_kv]
    int* row_keys = keys.data() + size_t(i) * n_kv;
    // A row usually sees a long run of keys from 0 (the cached prefix): found with memchr, listed without tests.
    const void* first_hidden = std::memchr(row_mask, 0, size_t(n_kv));
    const int run = first_hidden ? int(static_cast<const uint8_t*>(first_hidden) - row_mask) : n_kv;
    runs[i] = run;
    for (int j = 0; j < run; ++j) row_keys[j] = j;
    int n = run;
    for (int j = run; j < n_kv; ++j) {
      row_keys[n] = j;
      n += row_mask[j] != 0;
    }
    if (n == 0) return false;
    n_vis[i] = n;
  }
  return true;
}

// One task: KV head kvh, query rows [row0, row0 + rows). k_tiles: where head kvh's key tiles come from; v_rows: where
// its value rows start; all_keys / all_n_vis / all_runs: list_visible_keys' lists of every row of the call.
template <typename Keys, typename Rows>
TS_SIMD void attend_block(const float* q, const Keys& k_tiles, const Rows& v_rows, const int* all_keys,
                          const int* all_n_vis, const int* all_runs, float* out, int row0, int rows, int kvh,
                          int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale, TaskScratch<typename Rows::Elem>& s) {
  using KvT = typename Rows::Elem;
  const int group = n_heads / n_kv_heads;
  const int* n_vis = all_n_vis + row0;  // [rows]
  const int* prefix_run = all_runs + row0;  // [rows]
  s.scores.resize(size_t(rows) * group * n_kv);
  s.acc.assign(size_t(rows) * group * head_dim, 0.0f);
  auto acc_of = [&](int i, int g) { return s.acc.data() + (size_t(i) * group + g) * head_dim; };
  auto q_of = [&](int i, int g) { return q + (size_t(row0 + i) * n_heads + size_t(kvh) * group + g) * head_dim; };
  auto scores_of = [&](int i, int g) { return s.scores.data() + (size_t(i) * group + g) * n_kv; };
  auto keys_of = [&](int i) { return all_keys + size_t(row0 + i) * n_kv; };

  // Visible keys of row i inside key block [j0, j1): [cursor, end) of its list; advances the cursor.
  // The list is ascending and the cursor at its first key >= the block's first: a binary search over at most
  // the block's length finds the end.
  // Keys [0, prefix_run[i]) are all visible to row i, so there the list index is the key and no list is read.
  // Elsewhere a row that sees the whole block [j0, j1) has keys[t0 + j1 - j0 - 1] == j1 - 1 (its keys are
  // ascending, distinct and >= j0): checked first, it skips the search's unpredictable branches.
  auto block_range = [&](int i, int j0, int j1, int& t0, int& t1) {
    t0 = s.cursor[i];
    const int* keys = keys_of(i);
    const int last = t0 + (j1 - j0) - 1;
    if (j1 <= prefix_run[i])
      t1 = j1;
    else if (last < n_vis[i] && keys[last] == j1 - 1)
      t1 = last + 1;
    else
      t1 = int(std::lower_bound(keys + t0, keys + std::min(n_vis[i], t0 + kKeyBlock), j1) - keys);
    s.cursor[i] = t1;
  };
  const bool prefetch = v_rows.prefetch(head_dim);
  const bool dense_whole = head_dim % kW == 0;  // the dense value tiles
  // bf16 K/V on the avx512bf16 build: both products with vdpbf16ps (attention_dot-inl.h).
  constexpr bool kDot = kDotProducts<KvT>;  // the dot-product paths exist (calls to them sit under `if constexpr`)
  using DotRounding = std::conditional_t<kDot, RoundToBf16, KeepF32>;
  const bool dot = kDot && head_dim % kW == 0;
  auto q2_of = [&](int i, int g) { return s.q2.data() + (size_t(i) * group + g) * (head_dim / 2); };
  if constexpr (kDot) {
    if (dot) s.q2.resize(size_t(rows) * group * (head_dim / 2));
    for (int i = 0; dot && i < rows; ++i)
      for (int g = 0; g < group; ++g) round_query_pairs(q_of(i, g), head_dim, q2_of(i, g));
  }
  // Per key block: the rows that see all of it go to the dense tiles (their pairs listed in dense_q / dense_s /
  // dense_acc), the others to the per-row path over their visible keys.
  s.first.resize(rows);
  s.dense_q.resize(size_t(rows) * group);
  s.dense_s.resize(size_t(rows) * group);
  s.dense_acc.resize(size_t(rows) * group);
  s.dense_q2.resize(size_t(rows) * group);
  s.dense_row.resize(rows);
  auto split_block = [&](int j0, int j1, bool scores_phase) {
    int pairs = 0;
    for (int i = 0; i < rows; ++i) {
      int t0, t1;
      block_range(i, j0, j1, t0, t1);
      s.first[i] = t0;
      s.dense_row[i] = 0;
      if (t1 - t0 != j1 - j0) continue;  // partial: the per-row path takes [first, cursor)
      // Key pairs follow the row's list: the dense value tiles pair keys (j0, j0 + 1), ..., so only from an even
      // list index (blocks have even lengths but the last).
      if (dot && !scores_phase && (t0 & 1) != 0) continue;
      s.dense_row[i] = 1;
      for (int g = 0; g < group; ++g, ++pairs) {
        s.dense_s[pairs] = scores_of(i, g) + t0;
        if (scores_phase) {
          s.dense_q[pairs] = q_of(i, g);
          if (dot) s.dense_q2[pairs] = q2_of(i, g);
        } else {
          s.dense_acc[pairs] = acc_of(i, g);
        }
      }
    }
    return pairs;
  };
  // Keys [0, shared) are visible to every row of the task (the cached prefix of a tree): a block ends there, so
  // the prefix's last keys go to the dense tiles too, not to the per-row path with the tree's nodes. Block bounds
  // only change the loop nesting, never a pair's arithmetic.
  const int shared = *std::min_element(prefix_run, prefix_run + rows);
  // Blocks end on tile bounds (64 keys, 4 tiles), or at `shared` rounded down to even (so that every block but the
  // last has an even length, as the key pairs of the bf16 dot products need).
  const int shared_even = shared & ~1;
  auto block_end = [&](int j0) {
    const int j1 = std::min(n_kv, (j0 & ~(kTileKeys - 1)) + kKeyBlock);
    return j0 < shared_even && shared_even < j1 ? shared_even : j1;
  };
  // 1. Scores, key block by key block. A row that sees only part of the block (a tree's own nodes) scores the
  // whole block for its heads, then keeps its visible keys: a key's score is the same bits either way.
  s.cursor.assign(rows, 0);
  s.row_scores.resize(size_t(rows) * group * kKeyBlock);
  s.row_q.resize(size_t(rows) * group);
  s.row_s.resize(size_t(rows) * group);
  s.row_q2.resize(size_t(rows) * group);
  for (int j0 = 0, j1; j0 < n_kv; j0 = j1) {
    j1 = block_end(j0);
    if (j1 < n_kv) k_tiles.prefetch_runs(j1, block_end(j1), head_dim);  // the next block's
    const int pairs = split_block(j0, j1, true);
    const int tb0 = j0 & ~(kTileKeys - 1);
    const KvT* const* tiles =
        k_tiles.block(tb0, (j1 - tb0 + kTileKeys - 1) / kTileKeys, n_kv, head_dim, s.k_tiles, s.k_tile_ptrs);
    if (pairs > 0) {
      if (dot) {
        if constexpr (kDot)
          score_block<DotScores>(s.dense_q2.data(), s.dense_s.data(), pairs, j0, j1, tiles, head_dim, scale);
      } else {
        score_block<FmaScores>(s.dense_q.data(), s.dense_s.data(), pairs, j0, j1, tiles, head_dim, scale);
      }
    }
    // The rows that see part of the block score all of it together (their pairs share the tile passes), then each
    // keeps its visible keys.
    int partial_pairs = 0;
    for (int i = 0; i < rows; ++i) {
      // nothing visible here, or the block went to the tiles
      if (s.cursor[i] == s.first[i] || s.dense_row[i]) continue;
      for (int g = 0; g < group; ++g, ++partial_pairs) {
        s.row_q[partial_pairs] = q_of(i, g);
        s.row_s[partial_pairs] = s.row_scores.data() + size_t(partial_pairs) * kKeyBlock;  // [j1 - j0] keys j0...
        if (dot) s.row_q2[partial_pairs] = q2_of(i, g);
      }
    }
    if (partial_pairs == 0) continue;
    if (dot) {
      if constexpr (kDot)
        score_block<DotScores>(s.row_q2.data(), s.row_s.data(), partial_pairs, j0, j1, tiles, head_dim, scale);
    } else {
      score_block<FmaScores>(s.row_q.data(), s.row_s.data(), partial_pairs, j0, j1, tiles, head_dim, scale);
    }
    for (int i = 0, x = 0; i < rows; ++i) {
      const int t0 = s.first[i], t1 = s.cursor[i];
      if (t1 == t0 || s.dense_row[i]) continue;
      const int* keys = keys_of(i);
      for (int g = 0; g < group; ++g, ++x) {
        float* row_scores = scores_of(i, g);
        for (int t = t0; t < t1; ++t) row_scores[t] = s.row_s[x][keys[t] - j0];
      }
    }
  }
  // 2. Softmax numerators and normalisers.
  s.inv_sum.resize(size_t(rows) * group);
  for (int i = 0; i < rows; ++i)
    for (int g = 0; g < group; ++g) {
      float sum_p = 0;
      if (dot) {
        if constexpr (kDot) sum_p = exp_shifted(scores_of(i, g), n_vis[i], DotRounding{});
      } else {
        sum_p = exp_shifted(scores_of(i, g), n_vis[i]);
      }
      s.inv_sum[size_t(i) * group + g] = 1.0f / sum_p;
    }
  // 3. Weighted sums of values, key block by key block again.
  s.cursor.assign(rows, 0);
  for (int j0 = 0, j1; j0 < n_kv; j0 = j1) {
    j1 = block_end(j0);
    if (j1 < n_kv) v_rows.prefetch_runs(j1, block_end(j1), head_dim);  // the next block's
    const int pairs = split_block(j0, j1, false);
    if (pairs > 0) {
      if (dot) {
        if constexpr (kDot)
          values_dense_dot(s.dense_s.data(), s.dense_acc.data(), pairs, j0, j1 - j0, v_rows, head_dim);
      } else if (dense_whole)
        values_dense<true>(s.dense_s.data(), s.dense_acc.data(), pairs, j0, j1 - j0, v_rows, head_dim, prefetch);
      else
        values_dense<false>(s.dense_s.data(), s.dense_acc.data(), pairs, j0, j1 - j0, v_rows, head_dim, prefetch);
    }
    for (int i = 0; i < rows; ++i) {
      const int t0 = s.first[i], t1 = s.cursor[i];
      if (t1 == t0 || s.dense_row[i]) continue;  // nothing visible here, or the block went to the tiles
      if (dot) {
        if constexpr (kDot)
          for (int g = 0; g < group; ++g)
            accumulate_values_dot(scores_of(i, g), keys_of(i), t0, t1, n_vis[i], v_rows, head_dim, acc_of(i, g));
        continue;
      }
      const int* keys = keys_of(i) + t0;
      int g = 0;
      for (; g + 2 <= group; g += 2)
        accumulate_values<true>(scores_of(i, g) + t0, scores_of(i, g + 1) + t0, keys, t1 - t0, v_rows, head_dim,
                                acc_of(i, g), acc_of(i, g + 1), prefetch && pairs == 0 && i == 0 && g == 0);
      if (g < group)
        accumulate_values<false>(scores_of(i, g) + t0, nullptr, keys, t1 - t0, v_rows, head_dim, acc_of(i, g),
                                 nullptr, prefetch && pairs == 0 && i == 0 && g == 0);
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int g = 0; g < group; ++g) {
      float* oh = out + (size_t(row0 + i) * n_heads + size_t(kvh) * group + g) * head_dim;  // [head_dim]
      const float* a = acc_of(i, g);
      const V inv = set1(s.inv_sum[size_t(i) * group + g]);
      for (int d = 0; d < head_dim; d += kW) store_n(oh + d, mul(load_n(a + d, head_dim - d), inv), head_dim - d);
    }
}

// Splits the call into tasks (KV head, block of query rows); rows_of(kvh) gives head kvh's key and value rows.
// before_head (kv_span.h), when given, runs once per KV head before its rows are read: inside that head's task where
// the call has one task per head, the heads then split over the threads in fixed contiguous ranges.
template <typename RowsOf>
bool attention_tasks(const float* q, const RowsOf& rows_of, const uint8_t* visible, float* out, int n_q, int n_kv,
                     int n_heads, int n_kv_heads, int head_dim, float scale, const KVHeadHook* before_head = nullptr) {
  const int rows_per = rows_per_task(n_q, n_kv_heads);
  const int blocks = (n_q + rows_per - 1) / rows_per;
  const int64_t tasks = int64_t(blocks) * n_kv_heads;
  thread_local std::vector<int> key_lists, n_vis_lists, run_lists;  // the calling thread's, read by the workers
  if (!list_visible_keys(visible, n_q, n_kv, key_lists, n_vis_lists, run_lists)) return false;
  // Pointers, not the names: inside the task a thread_local name would be the worker's own (empty) copy.
  const int* keys = key_lists.data();   // [n_q, n_kv]
  const int* n_vis = n_vis_lists.data();  // [n_q]
  const int* runs = run_lists.data();     // [n_q]
  // Work of the whole call ~ 2 n_q n_heads n_kv head_dim multiply-adds; parallel from 128k of them: a decode row of
  // 8 query heads of 64 over 128+ keys. In a forward its K/V come from L3 or DRAM, microseconds of reading that two
  // cores share, against a hand-off of ~0.3 us; over ~100 keys the split measured slower (docs/results/
  // optimization-notes.md, "Thread hand-off cost").
  const bool threaded = int64_t(n_q) * n_heads * n_kv * head_dim >= (1 << 16);
  const auto run_task = [&](int64_t task) {
    const int block = int(task / n_kv_heads), kvh = int(task % n_kv_heads);
    const int row0 = block * rows_per, rows = std::min(rows_per, n_q - row0);
    const auto [k_tiles, v_rows] = rows_of(kvh);
    thread_local TaskScratch<typename std::decay_t<decltype(v_rows)>::Elem> scratch;
    attend_block(q, k_tiles, v_rows, keys, n_vis, runs, out, row0, rows, kvh, n_kv, n_heads, n_kv_heads, head_dim,
                 scale, scratch);
  };
  if (before_head != nullptr && blocks == 1) {
    // A head's new rows are written and read on one core, and the same heads stay on the same cores from call to
    // call, so its tiles do not move between cores (docs/results/optimization-notes.md, "Attention: a KV head's
    // rows written by the thread that reads them").
    parallel_ranges(n_kv_heads, threaded, [&](int64_t h0, int64_t h1) {
      for (int64_t kvh = h0; kvh < h1; ++kvh) {
        (*before_head)(int(kvh));
        run_task(kvh);
      }
    });
    return true;
  }
  for (int g = 0; before_head != nullptr && g < n_kv_heads; ++g) (*before_head)(g);
  parallel_tasks(tasks, threaded, run_task);
  return true;
}

template <typename KvT>
bool attention_kv(const float* q, const KvT* k, const KvT* v, int64_t kv_row_stride, int64_t kv_head_stride,
                  const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim,
                  float scale) {
  auto rows_of = [&](int kvh) {
    const size_t head_offset = size_t(kvh) * size_t(kv_head_stride);
    return std::pair{TransposedKeys<StridedRows<KvT>>{StridedRows<KvT>{k + head_offset, size_t(kv_row_stride)}},
                     StridedRows<KvT>{v + head_offset, size_t(kv_row_stride)}};
  };
  return attention_tasks(q, rows_of, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

template <typename KvT>
bool attention_paged_kv(const float* q, const KvT* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                        int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                        int n_kv_heads, int head_dim, float scale) {
  auto rows_of = [&](int kvh) {
    const size_t head_offset = size_t(kvh) * size_t(page_head_stride);
    const PagedRows<KvT> k_rows{pages, size_t(k_offset) + head_offset, page_shift, size_t(head_dim)};
    return std::pair{TransposedKeys<PagedRows<KvT>>{k_rows},
                     PagedRows<KvT>{pages, size_t(v_offset) + head_offset, page_shift, size_t(head_dim)}};
  };
  return attention_tasks(q, rows_of, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale);
}

// The spans' tiles (keys) and value tiles of every KV head, as tables: the kernel reads a key block's tiles through
// them and value row j at v_tiles[j >> 4] + (j & 15) * head_dim (PagedRows with pages of 16 rows).
template <typename KvT>
bool attention_tiled_kv(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out, int n_q,
                        int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                        const KVHeadHook* before_head) {
  const int n_tiles = (n_kv + kTileKeys - 1) / kTileKeys;
  thread_local std::vector<const KvT*> tables;  // [2 (keys, values), n_kv_heads, n_tiles]; the calling thread's
  tables.resize(size_t(2) * n_kv_heads * n_tiles);
  const KvT** k_tables = tables.data();
  const KvT** v_tables = k_tables + size_t(n_kv_heads) * n_tiles;
  const size_t tile_elems = size_t(kTileKeys) * head_dim;
  for (int sp = 0; sp < n_spans; ++sp) {
    const int t0 = spans[sp].first_row / kTileKeys;
    const int t1 = sp + 1 < n_spans ? spans[sp + 1].first_row / kTileKeys : n_tiles;
    for (int g = 0; g < n_kv_heads; ++g) {
      const size_t head = size_t(g) * size_t(spans[sp].head_stride);
      const KvT* k = static_cast<const KvT*>(spans[sp].k) + head;
      const KvT* v = static_cast<const KvT*>(spans[sp].v) + head;
      for (int t = t0; t < t1; ++t) {
        k_tables[size_t(g) * n_tiles + t] = k + size_t(t - t0) * tile_elems;
        v_tables[size_t(g) * n_tiles + t] = v + size_t(t - t0) * tile_elems;
      }
    }
  }
  auto rows_of = [&](int kvh) {
    const size_t at = size_t(kvh) * n_tiles;
    return std::pair{KeyTiles<KvT>{k_tables + at}, PagedRows<KvT>{v_tables + at, 0, 4, size_t(head_dim)}};
  };
  return attention_tasks(q, rows_of, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale, before_head);
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

// K/V in pages of 2^page_shift rows (see ops.h, attention_paged): f32, or bf16 bits.
bool attention_paged(const float* q, const float* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  return attention_paged_kv(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv,
                            n_heads, n_kv_heads, head_dim, scale);
}
bool attention_paged(const float* q, const uint16_t* const* pages, int page_shift, int64_t k_offset, int64_t v_offset,
                     int64_t page_head_stride, const uint8_t* visible, float* out, int n_q, int n_kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
  return attention_paged_kv(q, pages, page_shift, k_offset, v_offset, page_head_stride, visible, out, n_q, n_kv,
                            n_heads, n_kv_heads, head_dim, scale);
}

// K/V in spans of tiles (see ops.h, attention_tiled): f32, or bf16 bits.
bool attention_tiled(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out, int n_q,
                     int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale, const KVHeadHook* before_head) {
  return attention_tiled_kv<float>(q, spans, n_spans, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale,
                                   before_head);
}
bool attention_tiled_bf16kv(const float* q, const KVSpan* spans, int n_spans, const uint8_t* visible, float* out,
                            int n_q, int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const KVHeadHook* before_head) {
  return attention_tiled_kv<uint16_t>(q, spans, n_spans, visible, out, n_q, n_kv, n_heads, n_kv_heads, head_dim,
                                      scale, before_head);
}

}  // namespace ts::kernels::cpu::TS_SIMD_NS
