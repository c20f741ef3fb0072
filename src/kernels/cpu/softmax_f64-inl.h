// The double-precision passes of the target's processed distribution (sampling/distribution.cc), written once as
// plain lane-independent loops that the compiler vectorises, and compiled per variant by softmax_f64_scalar.cc,
// softmax_f64_avx2.cc and softmax_f64_avx512.cc. The including file defines
//   TS_F64_NS      the namespace (scalar, avx2, avx512)
//   TS_F64_TARGET  the target attribute, empty for scalar (the base x86-64 build)
// Every operation is an IEEE add, multiply, divide, compare or conversion in a fixed order, never contracted to FMA
// (fp-contract=off: GCC's default for GNU C++ is to contract), so every variant computes the same bits and only
// the speed differs; tests/kernels/dispatch_test.cc checks the bits per variant.
#include <cstdint>
#include <cstring>
#include <limits>

// exp_block's loops are vectorised at -O2 already; the element-wise loops need -O3's vectoriser.
#define TS_F64_EXP TS_F64_TARGET __attribute__((optimize("fp-contract=off")))
#define TS_F64_VEC TS_F64_TARGET __attribute__((optimize("O3", "fp-contract=off")))

namespace ts::kernels::cpu::TS_F64_NS {

namespace {

// exp of kExpLanes doubles x <= 0 (-inf included): x = k ln2 + r (Cody-Waite split, |r| <= ln2 / 2), exp(r) by its
// Taylor polynomial of degree 13 (truncation < 1e-17 relative) in Horner form, times 2^k built in the exponent
// bits. Below -700 (where 2^k would leave the normal range) the lane builds 2^(k + 600) instead and multiplies by
// 2^-600 last, so the result rounds once to exp(x)'s subnormal or 0; x is clamped to -760 first (exp(-760)
// rounds to 0), which also sends -inf (and NaN, which callers count apart) to 0.
constexpr int kExpLanes = 32;  // 4 independent AVX-512 vectors (8 AVX2): the Horner chains overlap

// x, out: [kExpLanes]; out may alias x (every lane is read before any is written).
TS_F64_EXP void exp_block(const double* x, double* out) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2: 32 leading bits, so k * kLn2Hi
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // is exact for |k| < 2^11; kLn2Lo is the rest
  constexpr double kRound = 0x1.8p52;  // adding it rounds |v| < 2^51 to an integer in the low mantissa bits
  constexpr double kFastMin = -700, kLowest = -760, kUnshift = 0x1p-600;
  constexpr int64_t kUnshiftExponent = 600;
  int64_t round_bits;
  std::memcpy(&round_bits, &kRound, 8);
  double r[kExpLanes], p[kExpLanes], post[kExpLanes];  // [kExpLanes] each
  int64_t scale[kExpLanes];                             // [kExpLanes] bits of 2^k
  for (int i = 0; i < kExpLanes; ++i) {
    const bool low = x[i] < kFastMin;
    const double v = x[i] > kLowest ? x[i] : kLowest;  // in [-760, 0]
    post[i] = low ? kUnshift : 1.0;
    const double t = v * kLog2e + kRound;
    const double k = t - kRound;
    int64_t bits;
    std::memcpy(&bits, &t, 8);
    // 2^k for k in [-1010, 0], 2^(k + 600) below -700 (k >= -1097): a normal double either way.
    scale[i] = (bits - round_bits + 1023 + (low ? kUnshiftExponent : 0)) << 52;
    r[i] = (v - k * kLn2Hi) - k * kLn2Lo;
  }
  constexpr double c[14] = {1.0,           1.0,            1.0 / 2,         1.0 / 6,        1.0 / 24,
                            1.0 / 120,     1.0 / 720,      1.0 / 5040,      1.0 / 40320,    1.0 / 362880,
                            1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};
  for (int i = 0; i < kExpLanes; ++i) p[i] = c[13];
#pragma GCC unroll 13
  for (int d = 12; d >= 0; --d)
    for (int i = 0; i < kExpLanes; ++i) p[i] = p[i] * r[i] + c[d];
  for (int i = 0; i < kExpLanes; ++i) {
    double two_k;
    std::memcpy(&two_k, &scale[i], 8);
    out[i] = (p[i] * two_k) * post[i];
  }
}

}  // namespace

TS_F64_EXP void exp_nonpositive_f64(const double* x, int n, double* out) {
  int i = 0;
  for (; i + kExpLanes <= n; i += kExpLanes) exp_block(x + i, out + i);
  if (i < n) {
    double lanes[kExpLanes] = {};  // [kExpLanes] the tail, padded with exp(0)
    for (int j = 0; j < n - i; ++j) lanes[j] = x[i + j];
    exp_block(lanes, lanes);
    for (int j = 0; j < n - i; ++j) out[i + j] = lanes[j];
  }
}

// 8 interleaved partial sums combined pairwise: a fixed order whose chains overlap.
TS_F64_VEC double sum_f64(const double* x, int n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += x[i + k];
  for (int k = 0; i < n; ++i, ++k) part[k] += x[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

TS_F64_VEC void divide_f64(double* x, int n, double by) {
  for (int i = 0; i < n; ++i) x[i] /= by;
}

// One pass, lane-wise max (x > m ? x : m never lets a NaN replace a lane; NaNs are counted instead).
TS_F64_VEC double scale_to_f64_and_max(const float* logits, int n, double temperature, double* z, int* nan_count) {
  double lane_max[8];
  for (int k = 0; k < 8; ++k) lane_max[k] = -std::numeric_limits<double>::infinity();
  int nans = 0;
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = static_cast<double>(logits[i + k]) / temperature;
      z[i + k] = v;
      nans += v != v;
      lane_max[k] = v > lane_max[k] ? v : lane_max[k];
    }
  for (int k = 0; i < n; ++i, ++k) {
    const double v = static_cast<double>(logits[i]) / temperature;
    z[i] = v;
    nans += v != v;
    lane_max[k] = v > lane_max[k] ? v : lane_max[k];
  }
  double m = lane_max[0];
  for (int k = 1; k < 8; ++k) m = lane_max[k] > m ? lane_max[k] : m;
  *nan_count = nans;
  return m;
}

}  // namespace ts::kernels::cpu::TS_F64_NS

#undef TS_F64_EXP
#undef TS_F64_VEC
