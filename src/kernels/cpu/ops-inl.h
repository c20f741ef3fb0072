// The row-wise and element-wise ops of ops.h, written once against the vector layer (simd_avx2.h /
// simd_avx512.h) and compiled per ISA by ops_avx2.cc and ops_avx512.cc. Each row (or element) is computed by the
// same instruction sequence whatever the batch size, and threads only split rows or element ranges.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_math-inl.h"

namespace ts::kernels::cpu::TS_SIMD_NS {

// Below this many elements a parallel region was measured to cost more than it saves (docs/results/
// optimization-notes.md, "Thread hand-off cost"; swiglu_rows splits from fewer, "Activation quantizing: threads split
// the blocks").
constexpr int64_t kParallelMinElems = 1 << 15;

// Vectors [v0, v1) of [0, n) (vector v covers elements v kW ...).
TS_SIMD void add_span(float* dst, const float* src, int64_t n, int64_t v0, int64_t v1) {
  for (int64_t i = v0 * kW; i < n && i < v1 * kW; i += kW)
    store_n(dst + i, add(load_n(dst + i, n - i), load_n(src + i, n - i)), n - i);
}

void add(float* dst, const float* src, int64_t n) {
  parallel_ranges((n + kW - 1) / kW, n >= 4 * kParallelMinElems,
                  [&](int64_t v0, int64_t v1) { add_span(dst, src, n, v0, v1); });
}

TS_SIMD void rmsnorm_rows(const float* x, const float* weight, float* out, int dim, float eps, int64_t r0,
                          int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + size_t(r) * dim;  // [dim]
    float* outr = out + size_t(r) * dim;    // [dim], may alias xr: all reads of xr happen in dot_f32 first
    const float mean_sq = dot_f32(xr, xr, dim) / float(dim);
    const V inv_rms = set1(1.0f / std::sqrt(mean_sq + eps));
    // Same order as Hugging Face: (x * inv_rms) * weight.
    for (int i = 0; i < dim; i += kW)
      store_n(outr + i, mul(mul(load_n(xr + i, dim - i), inv_rms), load_n(weight + i, dim - i)), dim - i);
  }
}

void rmsnorm(const float* x, const float* weight, float* out, int rows, int dim, float eps) {
  parallel_ranges(rows, int64_t(rows) * dim >= kParallelMinElems,
                  [&](int64_t r0, int64_t r1) { rmsnorm_rows(x, weight, out, dim, eps, r0, r1); });
}

// The cos/sin table of the last rope call on this thread, [rows][2][half] (cos then sin per row). The model
// rotates q and then k with the same positions and frequencies, so the second call reuses the first's table
// (the trig is most of a decode step's RoPE cost). The key compares the frequency values, not the pointer.
struct RopeAngles {
  int half = -1;
  float scale = 0;
  std::vector<float> inv_freq;      // [half]
  std::vector<int32_t> positions;   // [rows]
  std::vector<float> cos_sin;       // [rows, 2, half]
};

// Rows [r0, r1): computes their cos/sin into cos_sin ([rows, 2, half]) unless `reuse`, then rotates every head.
TS_SIMD void rope_rows(float* x, const int32_t* positions, int heads, int head_dim, const float* inv_freq,
                       float attention_scale, bool reuse, float* cos_sin, int64_t r0, int64_t r1) {
  const int half = head_dim / 2;
  for (int64_t r = r0; r < r1; ++r) {
    float* cos_v = cos_sin + size_t(r) * 2 * half;  // [half]
    float* sin_v = cos_v + half;                    // [half]
    if (!reuse)
      for (int i = 0; i < half; ++i) {
        const float angle = float(positions[r]) * inv_freq[i];  // f32 product, as HF's freqs
        cos_v[i] = std::cos(angle) * attention_scale;
        sin_v[i] = std::sin(angle) * attention_scale;
      }
    for (int h = 0; h < heads; ++h) {
      float* lo = x + (size_t(r) * heads + h) * head_dim;  // [half]: x[i]
      float* hi = lo + half;                                 // [half]: x[i + half]
      for (int i = 0; i < half; i += kW) {
        const int64_t left = half - i;
        const V a = load_n(lo + i, left), b = load_n(hi + i, left);
        const V c = load_n(cos_v + i, left), s = load_n(sin_v + i, left);
        store_n(lo + i, sub(mul(a, c), mul(b, s)), left);
        store_n(hi + i, add(mul(b, c), mul(a, s)), left);
      }
    }
  }
}

void rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, const float* inv_freq,
          float attention_scale) {
  const int half = head_dim / 2;
  thread_local RopeAngles table;
  const bool reuse = table.half == half && table.scale == attention_scale && table.positions.size() == size_t(rows) &&
                     std::equal(positions, positions + rows, table.positions.begin()) &&
                     std::equal(inv_freq, inv_freq + half, table.inv_freq.begin());
  if (!reuse) {
    table.half = half;
    table.scale = attention_scale;
    table.inv_freq.assign(inv_freq, inv_freq + half);
    table.positions.assign(positions, positions + rows);
    table.cos_sin.resize(size_t(rows) * 2 * half);
  }
  float* cos_sin = table.cos_sin.data();  // this thread's table, filled and read by the workers below
  parallel_ranges(rows, int64_t(rows) * heads * head_dim >= kParallelMinElems, [&](int64_t r0, int64_t r1) {
    rope_rows(x, positions, heads, head_dim, inv_freq, attention_scale, reuse, cos_sin, r0, r1);
  });
}

// silu(g) = g / (1 + exp(-g)). For g below about -88, exp(-g) overflows to inf and the quotient is -0 where the
// exact value is a tiny negative number (|silu(g)| < 1e-36); see Ops.SwigluMatchesReference.
TS_SIMD void swiglu_span(const float* gate, const float* up, float* out, int64_t n, int64_t v0, int64_t v1) {
  const V one = set1(1.0f);
  for (int64_t i = v0 * kW; i < n && i < v1 * kW; i += kW) {
    const V g = load_n(gate + i, n - i);
    const V silu = div(g, add(one, exp_approx(sub(zero(), g))));
    store_n(out + i, mul(silu, load_n(up + i, n - i)), n - i);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  parallel_ranges((n + kW - 1) / kW, n >= kParallelMinElems,
                  [&](int64_t v0, int64_t v1) { swiglu_span(gate, up, out, n, v0, v1); });
}

// Rows split over threads from 16k elements, where splitting the activations' quantizing (half the work per element)
// starts to pay (docs/results/optimization-notes.md, "Activation quantizing: threads split the blocks").
constexpr int64_t kParallelSwigluRowsElems = int64_t(1) << 14;

void swiglu_rows(const float* gate_up, int rows, int inter, float* out) {
  const int64_t vectors = (int64_t(inter) + kW - 1) / kW;
  parallel_ranges(rows, int64_t(rows) * inter >= kParallelSwigluRowsElems, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* gate = gate_up + size_t(r) * 2 * inter;  // [gate | up]
      swiglu_span(gate, gate + inter, out + size_t(r) * inter, inter, 0, vectors);
    }
  });
}

// Sum of 4 kW-lane accumulators (acc[j] holds vectors j, j + 4, j + 8, ... of a buffer): the chains are 4x
// shorter than one accumulator's, so the error of a 150k-entry softmax normaliser stays ~1e-6, and the grouping
// depends only on the length.
TS_SIMD inline float sum4(const V (&acc)[4]) { return reduce_add(add(add(acc[0], acc[1]), add(acc[2], acc[3]))); }

// out[i] = exp(in[i] * scale - shift), 0 where in[i] * scale - shift < floor (and past n); returns the sum of out.
// in, out: [n] (may alias).
TS_SIMD inline float exp_pass(const float* in, int n, float scale, float shift, float floor_z, float* out) {
  const V s = set1(scale), shift_b = set1(shift), floor_b = set1(floor_z);
  V acc[4] = {zero(), zero(), zero(), zero()};
  for (int i = 0, j = 0; i < n; i += kW, j = (j + 1) & 3) {
    const V z = sub(mul(load_n(in + i, n - i), s), shift_b);
    const V e = select(mask_and(tail(n - i), ge(z, floor_b)), exp_approx(z), zero());
    store_n(out + i, e, n - i);
    acc[j] = add(acc[j], e);
  }
  return sum4(acc);
}

// In place, x: [n]. -inf entries give exactly 0 (exp_approx of -inf is +0).
TS_SIMD void softmax(float* x, int n) {
  V max_v = set1(-INFINITY);
  for (int i = 0; i < n; i += kW) max_v = max(max_v, select(tail(n - i), load_n(x + i, n - i), max_v));
  // Floor -inf: every exponent counts (exp_approx flushes below -104 to 0 itself).
  const float sum = exp_pass(x, n, 1.0f, reduce_max(max_v), -INFINITY, x);
  const V inv_sum = set1(1.0f / sum);
  for (int i = 0; i < n; i += kW) store_n(x + i, mul(load_n(x + i, n - i), inv_sum), n - i);
}

// The draft softmax (sampling/softmax_f32.h), first pass: max of logits * scale over [0, n); NaN if any is NaN.
TS_SIMD float scaled_max(const float* logits, int n, float scale) {
  const V s = set1(scale);
  V max_v = set1(-INFINITY);
  M nan = is_nan(zero());  // all clear
  for (int i = 0; i < n; i += kW) {
    const M live = tail(n - i);
    const V z = mul(load_n(logits + i, n - i), s);
    nan = mask_or(nan, mask_and(live, is_nan(z)));
    max_v = max(max_v, select(live, z, max_v));
  }
  return any(nan) ? NAN : reduce_max(max_v);
}

// Second pass: out = exp(logits * scale - max_z) / sum, where exponents below -87.3 (and -inf logits) give
// exactly 0. logits, out: [n] (may alias).
TS_SIMD void exp_normalize(const float* logits, int n, float scale, float max_z, float* out) {
  const V inv_sum = set1(1.0f / exp_pass(logits, n, scale, max_z, -87.3f, out));
  for (int i = 0; i < n; i += kW) store_n(out + i, mul(load_n(out + i, n - i), inv_sum), n - i);
}

// One embedding row: src [dim] of bf16 (is_bf16) or f16 bits -> dst [dim] f32; exact conversions. The tail of
// fewer than kW values goes through a stack copy, so nothing past the row is read.
TS_SIMD void widen_row(const uint16_t* src, bool is_bf16, int dim, float* dst) {
  int i = 0;
  for (; i + kW <= dim; i += kW) storeu(dst + i, is_bf16 ? load_bf16(src + i) : load_f16(src + i));
  if (i < dim) {
    uint16_t last[kW] = {};
    std::memcpy(last, src + i, size_t(dim - i) * 2);
    store_n(dst + i, is_bf16 ? load_bf16(last) : load_f16(last), dim - i);
  }
}

// dst[i] = src[i] rounded to bf16 (nearest even), kept as f32.
TS_SIMD void round_to_bf16(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += kW) store_n(dst + i, round_bf16(load_n(src + i, n - i)), n - i);
}

// bits[i] = f32_to_bf16(src[i]).
TS_SIMD void to_bf16_bits(const float* src, int64_t n, uint16_t* bits) {
  for (int64_t i = 0; i < n; i += kW) store_bf16_bits_n(bits + i, round_bf16(load_n(src + i, n - i)), n - i);
}

}  // namespace ts::kernels::cpu::TS_SIMD_NS
