#include "sampling/chooser.h"

#include <vector>

#include "core/error.h"

namespace ts {

namespace {

uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

RandomChooser::RandomChooser(uint64_t seed) {
  for (uint64_t& s : state_) s = splitmix64(&seed);  // never all zero: splitmix64 is a bijection of a counter
}

uint64_t RandomChooser::next_u64() {  // xoshiro256** (Blackman & Vigna)
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double RandomChooser::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

namespace {

// The draw of RandomChooser::choose for weights of type T (double, or float widened exactly to double): the
// same sums in the same order, so both types give the same index for the same state.
template <typename T>
int draw(const T* probs, int n, double u01) {
  TS_CHECK(n > 0, "choose: need at least one option, got n = ", n);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    TS_DCHECK(probs[i] >= 0, "choose: negative probability ", probs[i], " at ", i);
    total += double(probs[i]);
  }
  TS_CHECK(total > 0, "choose: probabilities sum to ", total, ", expected > 0");
  // Scale u by the actual total so that rounding in the caller's normalisation cannot bias the last option.
  const double u = u01 * total;
  double cumulative = 0;
  int last_positive = -1;
  for (int i = 0; i < n; ++i) {
    if (probs[i] <= 0) continue;
    cumulative += double(probs[i]);
    last_positive = i;
    if (u < cumulative) return i;
  }
  return last_positive;  // u landed in the rounding gap at the end
}

}  // namespace

int Chooser::choose_f32(const float* weights, int n) {
  thread_local std::vector<double> widened;  // [n]
  widened.assign(weights, weights + n);
  return choose(widened.data(), n);
}

int RandomChooser::choose(const double* probs, int n) { return draw(probs, n, uniform()); }

int RandomChooser::choose_f32(const float* weights, int n) { return draw(weights, n, uniform()); }

}  // namespace ts
