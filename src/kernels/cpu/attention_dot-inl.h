// The avx512bf16 variant's attention over bf16 K/V (head_dim a multiple of 16): both products with vdpbf16ps, which
// multiplies bf16 pairs and adds them into f32 lanes at twice the rate of f32 FMAs (docs/benchmarks.md,
// "bench_qk_layouts"). Included by attention-inl.h, inside its namespace, when TS_ATTENTION_BF16_DOT is set
// (attention_avx512bf16.cc).
//
// Operands: q and the softmax numerators p are rounded to bf16 (round to nearest even, by vcvtneps2bf16), as a bf16
// model's own framework rounds them before its QK and PV products; K and V are bf16 already. Arithmetic (Intel
// SDM): per lane, acc += a_odd b_odd, then acc += a_even b_even, each product exact, each add rounded to nearest
// even, denormal inputs and results flushed to zero. So a lane's result depends only on its own operand pairs, in
// order:
//   QK: lane = key, pairs (q[d], q[d + 1]) x (k[d], k[d + 1]) for d = 0, 2, 4, ... The tile's rows d and d + 1
//       ([d][16] each, adjacent in memory) are interleaved into one vector of 16 (k[d], k[d + 1]) pairs.
//   PV: lane = output dimension, pairs (p_t, p_t+1) x (v_t, v_t+1) of the row's visible-key list, t = 0, 2, 4, ...
//       ascending (a list of odd length ends with (p_last, 0)). Pairs follow the list, not the key slots, so a tree
//       row (prefix, then its ancestors wherever the tree put them) forms the pairs the same row forms in a
//       sequential forward, and gets the same bits. A key block goes to the dense tiles for a row only if the row
//       sees all of it from an even list index; other rows take the per-row path, which handles the pairs whose
//       first key lies in the block.
// The softmax normaliser sums the rounded p, so the weights the products see sum to the normaliser.

template <typename KvT>
constexpr bool kDotProducts = std::is_same_v<KvT, uint16_t>;

using BH = __m512bh;
TS_SIMD inline BH as_bh(__m512i v) { return reinterpret_cast<BH>(v); }

// q[0, head_dim) rounded to bf16 pairs by vcvtneps2bf16: out[i] = bf16(q[2i]) | bf16(q[2i + 1]) << 16, that is the
// bf16 values in order (head_dim a multiple of 16).  out: [head_dim / 2]
// Nearest even, as f32_to_bf16, but a denormal q counts as zero, as vdpbf16ps counts a denormal operand. One
// instruction per 16 values: the scalar f32_to_bf16 loop was most of attend_block's own time in a tree's verify
// (docs/results/optimization-notes.md, "Attention: queries rounded by vcvtneps2bf16").
TS_SIMD inline void round_query_pairs(const float* q, int head_dim, uint32_t* out) {
  for (int d = 0; d < head_dim; d += kW)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + d / 2),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(q + d))));
}

// The bf16 bits of p, a value that is already a bf16 number (its low 16 bits are zero).
inline uint32_t bf16_bits(float p) {
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  return bits >> 16;
}

// v rounded to bf16 by vcvtneps2bf16 (nearest even; denormal inputs and results as zero), widened back to f32.
TS_SIMD inline V round_bf16_hw(V v) {
  const __m256i bits = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// exp_shifted's rounding for the dot products: numerators rounded to bf16, and their sum the normaliser.
struct RoundToBf16 {
  // exp(x) for x <= 0 to a relative 6e-5, far below the rounding that follows (2^-8): x = n ln2 + r, |r| <= ln2 / 2,
  // 2^n times the Taylor polynomial of degree 4 in r. Below -87 the result is 0 or a denormal, which rounds away.
  TS_SIMD V exp(V x) const {
    x = max(set1(-100.0f), x);
    const V n = round_nearest(mul(x, set1(1.44269504088896341f)));
    const V r = fnma(n, set1(0.693147180559945f), x);
    V p = fma(r, set1(1.0f / 24), set1(1.0f / 6));
    p = fma(p, r, set1(0.5f));
    p = fma(p, r, set1(1.0f));
    p = fma(p, r, set1(1.0f));
    return pow2_scale(p, n);
  }
  TS_SIMD V operator()(V e) const { return round_bf16_hw(e); }
};

// 16-bit lane indices: out[2i] = a[i], out[2i + 1] = b[i] (b's lanes numbered from 32), i < 16.
TS_SIMD inline __m512i pair_interleave_index() {
  alignas(64) static const uint16_t kIndex[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  return _mm512_load_si512(kIndex);
}
// 16 bf16 at a and 16 at b -> 16 (a[i], b[i]) pairs.
TS_SIMD inline BH interleave_rows(const uint16_t* a, const uint16_t* b, __m512i index) {
  const __m512i va = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
  const __m512i vb = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  return as_bh(_mm512_permutex2var_epi16(va, index, vb));
}

// score_tile with bf16 pairs: q2[x] = round_query_pairs of pair x.
template <int kQ, int kT>
TS_SIMD void score_tile_dot(const uint32_t* const* q2, float* const* s, const uint16_t* const* tiles, int tb, int j0,
                            int j1, int head_dim, float scale) {
  V acc[kQ][kT];
#pragma GCC unroll 8
  for (int x = 0; x < kQ; ++x)
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) acc[x][t] = zero();
  const uint16_t* tile[kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) tile[t] = tiles[t];
  const __m512i index = pair_interleave_index();
  for (int d = 0; d < head_dim; d += 2) {
    BH k[kT];  // 16 keys' (k[d], k[d + 1]) pairs per tile
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const uint16_t* rows = tile[t] + size_t(d) * kTileKeys;  // rows d, d + 1: [2][16]
      k[t] = interleave_rows(rows, rows + kTileKeys, index);
    }
#pragma GCC unroll 8
    for (int x = 0; x < kQ; ++x) {
      const BH qd = as_bh(_mm512_set1_epi32(int32_t(q2[x][d / 2])));
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) acc[x][t] = _mm512_dpbf16_ps(acc[x][t], qd, k[t]);
    }
  }
  store_scores<kQ, kT>(acc, s, tb, j0, j1, scale);
}

// score_tile_dot as score_block's policy: q as round_query_pairs' bf16 pairs.
struct DotScores {
  template <int kQ, int kT>
  TS_SIMD static void tile(const uint32_t* const* q2, float* const* s, const uint16_t* const* tiles, int tb, int j0,
                           int j1, int head_dim, float scale) {
    score_tile_dot<kQ, kT>(q2, s, tiles, tb, j0, j1, head_dim, scale);
  }
};

// Dense values with key pairs: acc[x][d0, d0 + 16 kVectors) += sum over pairs (t, t + 1), t = 0, 2, ... < n, of
// p[x][t] v_{j0 + t} + p[x][t + 1] v_{j0 + t + 1} (an odd n ends with (p, 0), the last row paired with itself).
template <int kQ, int kVectors, typename Rows>
TS_SIMD void values_tile_dot(const float* const* p, float* const* acc, int j0, int n, const Rows& v_rows, int d0) {
  V a[kQ][kVectors];
#pragma GCC unroll 6
  for (int x = 0; x < kQ; ++x)
#pragma GCC unroll 4
    for (int y = 0; y < kVectors; ++y) a[x][y] = loadu(acc[x] + d0 + y * kW);
  const __m512i index = pair_interleave_index();
  for (int t = 0; t < n; t += 2) {
    // Rows j0 + t and j0 + t + 1 are usually neighbours in one run of the row policy (j0 is even, and the cache's
    // pages hold 16 rows): then the second is `stride` after the first, without a second lookup.
    const bool second = t + 1 < n;
    const uint16_t* ra = v_rows(j0 + t) + d0;  // [16 kVectors]
    const uint16_t* rb = !second ? ra : v_rows.run(j0 + t) > 1 ? ra + v_rows.stride : v_rows(j0 + t + 1) + d0;
    BH v[kVectors];
#pragma GCC unroll 4
    for (int y = 0; y < kVectors; ++y) v[y] = interleave_rows(ra + y * kW, rb + y * kW, index);
#pragma GCC unroll 6
    for (int x = 0; x < kQ; ++x) {
      const uint32_t w = bf16_bits(p[x][t]) | (second ? bf16_bits(p[x][t + 1]) << 16 : 0u);
      const BH wv = as_bh(_mm512_set1_epi32(int32_t(w)));
#pragma GCC unroll 4
      for (int y = 0; y < kVectors; ++y) a[x][y] = _mm512_dpbf16_ps(a[x][y], wv, v[y]);
    }
  }
#pragma GCC unroll 6
  for (int x = 0; x < kQ; ++x)
#pragma GCC unroll 4
    for (int y = 0; y < kVectors; ++y) storeu(acc[x] + d0 + y * kW, a[x][y]);
}

// x 4 vectors: 24 accumulators + 4 value pairs + 1 weight pair of 32 zmm (8 pairs spilled and were slower)
constexpr int kDotValueQueries = 6;
template <typename Rows>
TS_SIMD void values_dense_dot(const float* const* p, float* const* acc, int pairs, int j0, int n, const Rows& v_rows,
                              int head_dim) {
  for (int x = 0; x < pairs; x += kDotValueQueries) {
    with_count<kDotValueQueries>(std::min(kDotValueQueries, pairs - x), [&](auto m) {
      constexpr int kQ = decltype(m)::value;
      int d0 = 0;
      for (; d0 + 4 * kW <= head_dim; d0 += 4 * kW) values_tile_dot<kQ, 4>(p + x, acc + x, j0, n, v_rows, d0);
      for (; d0 < head_dim; d0 += kW) values_tile_dot<kQ, 1>(p + x, acc + x, j0, n, v_rows, d0);
    });
  }
}

// The per-row path: acc[0, head_dim) += the pairs (t, t + 1) of the row's list whose first index t (even) lies in
// [t_begin, t_end); p: the row's numerators by list index, keys: its list, n_vis: the list's length.
template <typename Rows>
TS_SIMD void accumulate_values_dot(const float* p, const int* keys, int t_begin, int t_end, int n_vis,
                                   const Rows& v_rows, int head_dim, float* acc) {
  const __m512i index = pair_interleave_index();
  for (int d0 = 0; d0 < head_dim; d0 += 4 * kW) {
    const int vectors = std::min(4, (head_dim - d0) / kW);
    V a[4];
#pragma GCC unroll 4
    for (int y = 0; y < 4; ++y) a[y] = y < vectors ? loadu(acc + d0 + y * kW) : zero();
    for (int t = (t_begin + 1) & ~1; t < t_end; t += 2) {
      const bool second = t + 1 < n_vis;
      const uint16_t* ra = v_rows(keys[t]) + d0;
      const uint16_t* rb = second ? v_rows(keys[t + 1]) + d0 : ra;
      const uint32_t w = bf16_bits(p[t]) | (second ? bf16_bits(p[t + 1]) << 16 : 0u);
      const BH wv = as_bh(_mm512_set1_epi32(int32_t(w)));
#pragma GCC unroll 4
      for (int y = 0; y < 4; ++y)
        if (y < vectors) a[y] = _mm512_dpbf16_ps(a[y], wv, interleave_rows(ra + y * kW, rb + y * kW, index));
    }
#pragma GCC unroll 4
    for (int y = 0; y < 4; ++y)
      if (y < vectors) storeu(acc + d0 + y * kW, a[y]);
  }
}
