// AVX-512 masked grouped-query attention (contract in ops.h).
//
// One (query row, head) pair at a time, pairs split across threads. For a pair:
//   1. visible keys j ascending -> key list                               [n_vis]
//   2. score_j = scale * dot(q, k_j), each dot one FMA chain over head_dim, then a fixed horizontal sum
//   3. p_j = exp(score_j - max), sum_p over the list in 16-lane partial sums (grouping depends only on n_vis)
//   4. out = (sum_j p_j v_j) / sum_p, accumulated in ascending j, head_dim in register blocks of up to 128
// Nothing here reads another row's mask or depends on n_q, so a row of a tree batch equals the same row computed
// alone (tests/kernels/attention_test.cc checks this bit for bit).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/vec_avx512.h"

namespace ts::kernels::cpu {
namespace {

// scores[t] = scale * dot(q, k[keys[t]]) for t < n_vis. Four keys at a time as independent chains for speed;
// each key's own arithmetic is the same as in the one-key tail loop.
TS_AVX512_OPS void scores_for(const float* q, const float* k, int kv_stride, const int* keys, int n_vis, int head_dim,
                              float scale, float* scores) {
  int t = 0;
  for (; t + 4 <= n_vis; t += 4) {
    const float* k0 = k + size_t(keys[t]) * kv_stride;
    const float* k1 = k + size_t(keys[t + 1]) * kv_stride;
    const float* k2 = k + size_t(keys[t + 2]) * kv_stride;
    const float* k3 = k + size_t(keys[t + 3]) * kv_stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int d = 0; d < head_dim; d += 16) {
      const __mmask16 m = tail_mask(head_dim - d);
      const __m512 qd = _mm512_maskz_loadu_ps(m, q + d);
      a0 = _mm512_fmadd_ps(qd, _mm512_maskz_loadu_ps(m, k0 + d), a0);
      a1 = _mm512_fmadd_ps(qd, _mm512_maskz_loadu_ps(m, k1 + d), a1);
      a2 = _mm512_fmadd_ps(qd, _mm512_maskz_loadu_ps(m, k2 + d), a2);
      a3 = _mm512_fmadd_ps(qd, _mm512_maskz_loadu_ps(m, k3 + d), a3);
    }
    scores[t] = _mm512_reduce_add_ps(a0) * scale;
    scores[t + 1] = _mm512_reduce_add_ps(a1) * scale;
    scores[t + 2] = _mm512_reduce_add_ps(a2) * scale;
    scores[t + 3] = _mm512_reduce_add_ps(a3) * scale;
  }
  for (; t < n_vis; ++t) scores[t] = dot_f32(q, k + size_t(keys[t]) * kv_stride, head_dim) * scale;
}

// In place: scores -> exp(scores - max); returns their sum.
TS_AVX512_OPS float exp_shifted(float* scores, int n) {
  __m512 max_v = _mm512_set1_ps(-INFINITY);
  for (int t = 0; t < n; t += 16) max_v = _mm512_max_ps(max_v, _mm512_mask_loadu_ps(max_v, tail_mask(n - t), scores + t));
  const __m512 max_b = _mm512_set1_ps(_mm512_reduce_max_ps(max_v));
  __m512 sum = _mm512_setzero_ps();
  for (int t = 0; t < n; t += 16) {
    const __mmask16 m = tail_mask(n - t);
    const __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), max_b)));
    _mm512_mask_storeu_ps(scores + t, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// out[0, 16 NV) (masked to `width`) = sum_t p[t] * v[keys[t]][0, width) * inv_sum, t ascending.
template <int NV>
TS_AVX512_OPS void weighted_sum(const float* v, int kv_stride, const int* keys, const float* p, int n_vis, int width,
                                float inv_sum, float* out) {
  __m512 acc[NV];
  __mmask16 mask[NV];
  for (int b = 0; b < NV; ++b) {
    acc[b] = _mm512_setzero_ps();
    mask[b] = tail_mask(width - 16 * b);
  }
  for (int t = 0; t < n_vis; ++t) {
    const float* vj = v + size_t(keys[t]) * kv_stride;
    const __m512 pt = _mm512_set1_ps(p[t]);
    for (int b = 0; b < NV; ++b) acc[b] = _mm512_fmadd_ps(pt, _mm512_maskz_loadu_ps(mask[b], vj + 16 * b), acc[b]);
  }
  const __m512 inv = _mm512_set1_ps(inv_sum);
  for (int b = 0; b < NV; ++b) _mm512_mask_storeu_ps(out + 16 * b, mask[b], _mm512_mul_ps(acc[b], inv));
}

using WeightedSumFn = void (*)(const float*, int, const int*, const float*, int, int, float, float*);
constexpr WeightedSumFn kWeightedSum[9] = {nullptr,         weighted_sum<1>, weighted_sum<2>, weighted_sum<3>,
                                           weighted_sum<4>, weighted_sum<5>, weighted_sum<6>, weighted_sum<7>,
                                           weighted_sum<8>};

}  // namespace

// Returns false if some query row sees no key (the caller reports it).
bool attention_avx512(const float* q, const float* k, const float* v, const uint8_t* visible, float* out, int n_q,
                      int n_kv, int n_heads, int n_kv_heads, int head_dim, float scale) {
  const int group = n_heads / n_kv_heads;
  const int kv_stride = n_kv_heads * head_dim;  // floats between key rows
  const int64_t pairs = int64_t(n_q) * n_heads;
  bool all_rows_see_a_key = true;
  // Work of one pair ~ n_kv * head_dim; go parallel when there is enough of it.
#pragma omp parallel for schedule(dynamic, 4) if (pairs > 1 && pairs * n_kv * head_dim >= (1 << 15)) \
    reduction(&& : all_rows_see_a_key)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int i = int(pair / n_heads), h = int(pair % n_heads);
    thread_local std::vector<int> keys;      // [n_vis] visible key rows, ascending
    thread_local std::vector<float> scores;  // [n_vis] scores, then probabilities (unnormalised)
    keys.clear();
    const uint8_t* row_mask = visible + size_t(i) * n_kv;  // [n_kv]
    for (int j = 0; j < n_kv; ++j)
      if (row_mask[j]) keys.push_back(j);
    const int n_vis = int(keys.size());
    if (n_vis == 0) {
      all_rows_see_a_key = false;
      continue;
    }
    scores.resize(n_vis);
    const float* qh = q + (size_t(i) * n_heads + h) * head_dim;  // [head_dim]
    const int kvh = h / group;
    scores_for(qh, k + size_t(kvh) * head_dim, kv_stride, keys.data(), n_vis, head_dim, scale, scores.data());
    const float inv_sum = 1.0f / exp_shifted(scores.data(), n_vis);
    float* oh = out + (size_t(i) * n_heads + h) * head_dim;  // [head_dim]
    const float* vh = v + size_t(kvh) * head_dim;
    for (int d0 = 0; d0 < head_dim; d0 += 128) {
      const int width = std::min(128, head_dim - d0);
      kWeightedSum[(width + 15) / 16](vh + d0, kv_stride, keys.data(), scores.data(), n_vis, width, inv_sum, oh + d0);
    }
  }
  return all_rows_see_a_key;
}

}  // namespace ts::kernels::cpu
