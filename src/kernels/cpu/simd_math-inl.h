// Vector helpers shared by the kernel sources, written against the vector layer of the including file
// (simd_avx2.h or simd_avx512.h, included first). Compiled once per ISA, into that ISA's namespace.
//
// Batch invariance: helpers work per vector with masked tails (never a scalar tail loop), so an element's
// arithmetic depends only on its lane and the length, not on where the buffer sits in a batch.
#pragma once

#include <cstdint>

namespace ts::kernels::cpu::TS_SIMD_NS {

// exp(x) for f32, Cephes-style: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, then scale by 2^n. ~2 ulp.
// Inputs below -104 (including -inf) give +0, above ~88.7 +inf, NaN stays NaN.
TS_SIMD inline V exp_approx(V x) {
  x = max(set1(-104.0f), x);  // max(c, NaN) returns the NaN: it propagates
  x = min(set1(100.0f), x);   // keeps n finite; 2^145 still overflows to inf
  const V n = round_nearest(mul(x, set1(1.44269504088896341f)));
  V r = fnma(n, set1(0.693359375f), x);  // Cody-Waite: ln2 = hi + lo
  r = fnma(n, set1(-2.12194440e-4f), r);
  V p = set1(1.9875691500e-4f);
  p = fma(p, r, set1(1.3981999507e-3f));
  p = fma(p, r, set1(8.3334519073e-3f));
  p = fma(p, r, set1(4.1665795894e-2f));
  p = fma(p, r, set1(1.6666665459e-1f));
  p = fma(p, r, set1(5.0000001201e-1f));
  p = fma(p, mul(r, r), add(r, set1(1.0f)));
  return pow2_scale(p, n);
}

// Sum of x[0, n) in kW lane-wise partial sums, then the fixed horizontal reduction. Grouping depends only on n.
TS_SIMD inline float sum_f32(const float* x, int64_t n) {
  V acc = zero();
  for (int64_t i = 0; i < n; i += kW) acc = add(acc, load_n(x + i, n - i));
  return reduce_add(acc);
}

// dot(a, b) over [0, n) with one kW-lane FMA accumulator, fixed horizontal reduction.
TS_SIMD inline float dot_f32(const float* a, const float* b, int n) {
  V acc = zero();
  for (int i = 0; i < n; i += kW) acc = fma(load_n(a + i, n - i), load_n(b + i, n - i), acc);
  return reduce_add(acc);
}

}  // namespace ts::kernels::cpu::TS_SIMD_NS
