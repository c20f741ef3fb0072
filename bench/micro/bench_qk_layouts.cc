// Micro benchmark of K/V layouts for attention over a long history (the last chat turn's prefill: ~100 query rows
// over ~900 cached keys), one KV head on one thread, head_dim 64, bf16 K/V. It measures the two products alone (no
// softmax), in GMAC/s, so that a layout change can be judged before it is built:
//   QK per pair:   the kernel's arithmetic today: per (row, key) an FMA chain over head_dim in 16 lanes, then a
//                  horizontal sum; tiles of 4 rows x 4 keys share the loads (attention-inl.h, score_tile).
//   QK keys/lanes: K stored transposed per tile of 16 keys ([d][16 keys] bf16): per d one widened K vector, one FMA
//                  per row with q[row][d] broadcast; no horizontal sums. A row's scores keep their bits whatever the
//                  batch (each is one FMA chain over d), as decode and prefill need.
//   QK bf16 dot:   the same tiles as [d / 2][16 keys][2] bf16, q rounded to bf16 pairs, vdpbf16ps (AVX512-BF16).
//   PV per key:    today's values pass: per key one weight broadcast, one FMA per 16 output dims (V rows widened).
//   PV bf16 dot:   V stored as [key / 2][d][2] bf16, p rounded to bf16 pairs, vdpbf16ps.
//   bench_qk_layouts [rows keys reps]   (default 96 900 200; rows 1 = one decode row)
// Only on CPUs with AVX512-BF16 (it exits otherwise). Nothing here is used by the engine.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"

namespace {

constexpr int kD = 64;  // head_dim
#define TS_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

TS_BF16_TARGET inline __m512 widen(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// q: [rows][kD] f32, k: [keys][kD] bf16 (row-major per head, as the head-major cache), s: [rows][keys].
TS_BF16_TARGET void qk_per_pair(const float* q, const uint16_t* k, float* s, int rows, int keys) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int nr = std::min(4, rows - r0);
    for (int j0 = 0; j0 + 4 <= keys; j0 += 4) {
      __m512 acc[4][4];
      #pragma GCC unroll 8
      for (int x = 0; x < 4; ++x)
        #pragma GCC unroll 8
        for (int u = 0; u < 4; ++u) acc[x][u] = _mm512_setzero_ps();
      for (int d = 0; d < kD; d += 16) {
        __m512 kv[4];
        #pragma GCC unroll 8
        for (int u = 0; u < 4; ++u) kv[u] = widen(k + size_t(j0 + u) * kD + d);
        #pragma GCC unroll 8
        for (int x = 0; x < 4; ++x) {
          const __m512 qd = _mm512_loadu_ps(q + size_t(std::min(r0 + x, rows - 1)) * kD + d);
          #pragma GCC unroll 8
          for (int u = 0; u < 4; ++u) acc[x][u] = _mm512_fmadd_ps(qd, kv[u], acc[x][u]);
        }
      }
      #pragma GCC unroll 8
      for (int x = 0; x < nr; ++x)
        #pragma GCC unroll 8
        for (int u = 0; u < 4; ++u) s[size_t(r0 + x) * keys + j0 + u] = _mm512_reduce_add_ps(acc[x][u]);
    }
  }
}

// kt: [keys / 16][kD][16] bf16.
template <int R>
TS_BF16_TARGET void qk_lanes_tile(const float* q, const uint16_t* kt, float* s, int r0, int keys) {
  for (int t = 0; t < keys / 16; ++t) {
    const uint16_t* tile = kt + size_t(t) * kD * 16;
    __m512 acc[R];
    #pragma GCC unroll 8
    for (int x = 0; x < R; ++x) acc[x] = _mm512_setzero_ps();
    for (int d = 0; d < kD; ++d) {
      const __m512 kv = widen(tile + d * 16);
      #pragma GCC unroll 8
      for (int x = 0; x < R; ++x) acc[x] = _mm512_fmadd_ps(_mm512_set1_ps(q[size_t(r0 + x) * kD + d]), kv, acc[x]);
    }
    #pragma GCC unroll 8
    for (int x = 0; x < R; ++x) _mm512_storeu_ps(s + size_t(r0 + x) * keys + 16 * t, acc[x]);
  }
}
TS_BF16_TARGET void qk_keys_in_lanes(const float* q, const uint16_t* kt, float* s, int rows, int keys) {
  int r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) qk_lanes_tile<8>(q, kt, s, r0, keys);
  for (; r0 < rows; ++r0) qk_lanes_tile<1>(q, kt, s, r0, keys);
}

// q2: [rows][kD / 2] bf16 pairs as uint32, kt2: [keys / 16][kD / 2][16][2] bf16.
template <int R>
TS_BF16_TARGET void qk_dot_tile(const uint32_t* q2, const uint16_t* kt2, float* s, int r0, int keys) {
  for (int t = 0; t < keys / 16; ++t) {
    const uint16_t* tile = kt2 + size_t(t) * kD * 16;
    __m512 acc[R];
    #pragma GCC unroll 8
    for (int x = 0; x < R; ++x) acc[x] = _mm512_setzero_ps();
    for (int p = 0; p < kD / 2; ++p) {
      const __m512bh kv = (__m512bh)_mm512_loadu_si512(tile + p * 32);
      #pragma GCC unroll 8
      for (int x = 0; x < R; ++x)
        acc[x] = _mm512_dpbf16_ps(acc[x], (__m512bh)_mm512_set1_epi32(int(q2[size_t(r0 + x) * (kD / 2) + p])), kv);
    }
    #pragma GCC unroll 8
    for (int x = 0; x < R; ++x) _mm512_storeu_ps(s + size_t(r0 + x) * keys + 16 * t, acc[x]);
  }
}
TS_BF16_TARGET void qk_bf16_dot(const uint32_t* q2, const uint16_t* kt2, float* s, int rows, int keys) {
  int r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) qk_dot_tile<8>(q2, kt2, s, r0, keys);
  for (; r0 < rows; ++r0) qk_dot_tile<1>(q2, kt2, s, r0, keys);
}

// p: [rows][keys] f32, v: [keys][kD] bf16, out: [rows][kD]; tiles of 4 rows x 4 vectors (values_tile).
TS_BF16_TARGET void pv_per_key(const float* p, const uint16_t* v, float* out, int rows, int keys) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int nr = std::min(4, rows - r0);
    __m512 a[4][4];
    #pragma GCC unroll 8
    for (int x = 0; x < 4; ++x)
      #pragma GCC unroll 8
      for (int y = 0; y < 4; ++y) a[x][y] = _mm512_setzero_ps();
    for (int j = 0; j < keys; ++j) {
      __m512 vv[4];
      #pragma GCC unroll 8
      for (int y = 0; y < 4; ++y) vv[y] = widen(v + size_t(j) * kD + 16 * y);
      #pragma GCC unroll 8
      for (int x = 0; x < 4; ++x) {
        const __m512 w = _mm512_set1_ps(p[size_t(std::min(r0 + x, rows - 1)) * keys + j]);
        #pragma GCC unroll 8
        for (int y = 0; y < 4; ++y) a[x][y] = _mm512_fmadd_ps(w, vv[y], a[x][y]);
      }
    }
    #pragma GCC unroll 8
    for (int x = 0; x < nr; ++x)
      #pragma GCC unroll 8
      for (int y = 0; y < 4; ++y) _mm512_storeu_ps(out + size_t(r0 + x) * kD + 16 * y, a[x][y]);
  }
}

// p2: [rows][keys / 2] bf16 pairs as uint32, v2: [keys / 2][kD][2] bf16.
TS_BF16_TARGET void pv_bf16_dot(const uint32_t* p2, const uint16_t* v2, float* out, int rows, int keys) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int nr = std::min(4, rows - r0);
    __m512 a[4][4];
    #pragma GCC unroll 8
    for (int x = 0; x < 4; ++x)
      #pragma GCC unroll 8
      for (int y = 0; y < 4; ++y) a[x][y] = _mm512_setzero_ps();
    for (int jp = 0; jp < keys / 2; ++jp) {
      __m512bh vv[4];
      #pragma GCC unroll 8
      for (int y = 0; y < 4; ++y) vv[y] = (__m512bh)_mm512_loadu_si512(v2 + size_t(jp) * kD * 2 + 32 * y);
      #pragma GCC unroll 8
      for (int x = 0; x < 4; ++x) {
        const __m512bh w = (__m512bh)_mm512_set1_epi32(int(p2[size_t(std::min(r0 + x, rows - 1)) * (keys / 2) + jp]));
        #pragma GCC unroll 8
        for (int y = 0; y < 4; ++y) a[x][y] = _mm512_dpbf16_ps(a[x][y], w, vv[y]);
      }
    }
    #pragma GCC unroll 8
    for (int x = 0; x < nr; ++x)
      #pragma GCC unroll 8
      for (int y = 0; y < 4; ++y) _mm512_storeu_ps(out + size_t(r0 + x) * kD + 16 * y, a[x][y]);
  }
}

template <typename F>
double best_ms(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = cpu_ms();
    f();
    best = std::min(best, cpu_ms() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (!ts::cpu_features().avx512_bf16) {
    std::printf("bench_qk_layouts: this CPU has no AVX512-BF16\n");
    return 0;
  }
  const int rows = argc > 1 ? std::atoi(argv[1]) : 96, keys = (argc > 2 ? std::atoi(argv[2]) : 900) / 16 * 16;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 200;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> q(size_t(rows) * kD), p(size_t(rows) * keys), s(size_t(rows) * keys), out(size_t(rows) * kD);
  std::vector<uint16_t> k(size_t(keys) * kD), v(size_t(keys) * kD), kt(k.size()), kt2(k.size()), v2(v.size());
  for (float& x : q) x = nd(rng);
  for (float& x : p) x = std::abs(nd(rng)) / keys;
  for (uint16_t& x : k) x = ts::f32_to_bf16(nd(rng));
  for (uint16_t& x : v) x = ts::f32_to_bf16(nd(rng));
  for (int j = 0; j < keys; ++j)
    for (int d = 0; d < kD; ++d) {
      kt[size_t(j / 16) * kD * 16 + d * 16 + j % 16] = k[size_t(j) * kD + d];
      kt2[size_t(j / 16) * kD * 16 + (d / 2) * 32 + (j % 16) * 2 + d % 2] = k[size_t(j) * kD + d];
      v2[size_t(j / 2) * kD * 2 + d * 2 + j % 2] = v[size_t(j) * kD + d];
    }
  auto pairs = [](const std::vector<float>& x) {
    std::vector<uint32_t> y(x.size() / 2);
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = uint32_t(ts::f32_to_bf16(x[2 * i])) | uint32_t(ts::f32_to_bf16(x[2 * i + 1])) << 16;
    return y;
  };
  const std::vector<uint32_t> q2 = pairs(q), p2 = pairs(p);
  const double macs = double(rows) * keys * kD;
  auto report = [&](const char* name, double ms) {
    std::printf("  %-16s %9.1f us  %6.1f GMAC/s\n", name, ms * 1e3, macs / ms * 1e-6);
  };
  std::printf("one KV head, %d query rows x %d keys, head_dim %d, bf16 K/V, one thread (CPU clock), best of %d\n",
              rows, keys, kD, reps);
  report("QK per pair", best_ms(reps, [&] { qk_per_pair(q.data(), k.data(), s.data(), rows, keys); }));
  const float check_pair = s[size_t(rows - 1) * keys + keys - 1];
  report("QK keys/lanes", best_ms(reps, [&] { qk_keys_in_lanes(q.data(), kt.data(), s.data(), rows, keys); }));
  const float check_lanes = s[size_t(rows - 1) * keys + keys - 1];
  report("QK bf16 dot", best_ms(reps, [&] { qk_bf16_dot(q2.data(), kt2.data(), s.data(), rows, keys); }));
  const float check_dot = s[size_t(rows - 1) * keys + keys - 1];
  report("PV per key", best_ms(reps, [&] { pv_per_key(p.data(), v.data(), out.data(), rows, keys); }));
  const float check_pv = out[size_t(rows - 1) * kD + kD - 1];
  report("PV bf16 dot", best_ms(reps, [&] { pv_bf16_dot(p2.data(), v2.data(), out.data(), rows, keys); }));
  const float check_pv2 = out[size_t(rows - 1) * kD + kD - 1];
  // The layouts hold the same values: the last score and output agree to the arithmetic's rounding.
  std::printf("last score: per pair %.5f, keys/lanes %.5f, bf16 dot %.5f; last output: %.6f, %.6f\n", check_pair,
              check_lanes, check_dot, check_pv, check_pv2);
  return 0;
}
