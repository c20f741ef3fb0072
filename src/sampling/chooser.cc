#include "sampling/chooser.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "sampling/distribution.h"

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

constexpr int kBlock = 64;  // weights per block of draw_total()'s order

template <typename T>
double block_sum(const T* w, int m) {  // m <= kBlock weights, 8 interleaved partial sums
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= m; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(w[i + k]);
  for (int k = 0; i < m; ++i, ++k) part[k] += static_cast<double>(w[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Block sums into sums ([ceil(n / kBlock)]) and their total, added in block order.
template <typename T>
double blocked_total(const T* w, int n, std::vector<double>* sums) {
  sums->resize((n + kBlock - 1) / kBlock);
  double total = 0;
  for (int b = 0; b * kBlock < n; ++b) {
    (*sums)[b] = block_sum(w + b * kBlock, std::min(kBlock, n - b * kBlock));
    total += (*sums)[b];
  }
  return total;
}

// RandomChooser's draw for weights of type T (double, or float widened exactly): u01 * total is located first
// among the block sums, then within its block by a running sum. Each index owns an interval of [0, total) of
// width w[i] up to rounding, so P(i) = w[i] / total; zero weights own none. Two passes of independent sums
// instead of two dependent chains over the whole vocabulary.
template <typename T>
int draw(const T* w, int n, double u01) {
  TS_CHECK(n > 0, "choose: need at least one option, got n = ", n);
#ifdef TS_DEBUG_CHECKS
  for (int i = 0; i < n; ++i) TS_CHECK(w[i] >= 0, "choose: negative probability ", w[i], " at ", i);
#endif
  thread_local std::vector<double> sums;  // [blocks]
  const double total = blocked_total(w, n, &sums);
  TS_CHECK(total > 0, "choose: probabilities sum to ", total, ", expected > 0");
  // Scale u by the actual total so that rounding in the caller's normalisation cannot bias the last option.
  const double u = u01 * total;
  double base = 0;
  for (int b = 0; b * kBlock < n; ++b) {
    if (u < base + sums[b]) {
      const int begin = b * kBlock, end = std::min(n, begin + kBlock);
      double cumulative = base;
      int last_positive = -1;
      for (int i = begin; i < end; ++i) {
        if (!(w[i] > 0)) continue;
        cumulative += static_cast<double>(w[i]);
        last_positive = i;
        if (u < cumulative) return i;
      }
      if (last_positive >= 0) return last_positive;  // rounding: u fell past this block's running sum
    }
    base += sums[b];
  }
  for (int i = n - 1; i >= 0; --i)
    if (w[i] > 0) return i;  // u landed in the rounding gap at the end
  return n - 1;              // unreachable: total > 0
}

}  // namespace

double draw_total(const float* weights, int n) {
  thread_local std::vector<double> sums;
  return blocked_total(weights, n, &sums);
}

int Chooser::choose_f32(const float* weights, int n) {
  thread_local std::vector<double> widened;  // [n]
  widened.assign(weights, weights + n);
  return choose(widened.data(), n);
}

int RandomChooser::choose(const double* probs, int n) { return draw(probs, n, uniform()); }

int RandomChooser::choose_f32(const float* weights, int n) { return draw(weights, n, uniform()); }

int32_t sample_token(const float* logits, int vocab, const SamplingParams& params, Chooser& chooser,
                     std::vector<double>& probs) {
  if (params.temperature == 0) return argmax(logits, vocab);
  processed_distribution(logits, vocab, params, &probs);
  return chooser.choose(probs.data(), vocab);
}

}  // namespace ts
