// Every random decision in speculative decoding (draft draws, accept/reject coins, bonus tokens) goes through a
// Chooser, so that tests can replace it with one that enumerates every outcome with its exact probability.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampling_params.h"

namespace ts {

class Chooser {
 public:
  virtual ~Chooser() = default;
  // Returns index i with probability probs[i] / sum(probs); probs: [n], non-negative, sum ~1 and > 0.
  // Never returns an index whose probability is 0.
  virtual int choose(const double* probs, int n) = 0;
  // The same draw from float weights, i with probability weights[i] / draw_total(weights, n): choose() on the
  // weights widened to double (exact). This default widens into a buffer and calls choose(), so a chooser that
  // only implements choose() (the tests' enumerating one) sees the very values; RandomChooser reads the floats
  // directly. weights: [n].
  virtual int choose_f32(const float* weights, int n);
};

// The sum of a draw's weights in double, in RandomChooser's fixed order: consecutive blocks of 64 weights, each
// summed in 8 interleaved partial sums combined pairwise, the block sums added in block order. verify() divides
// by exactly this to rebuild the q_j a draft token was drawn from. weights: [n].
double draw_total(const float* weights, int n);

// Seeded and deterministic: xoshiro256** whose state is filled by splitmix64(seed). The same seed gives the same
// sequence of choices on every platform. A draw locates u * draw_total(weights) among the block sums of
// draw_total's order, then within its block: two passes of independent sums over the weights.
class RandomChooser : public Chooser {
 public:
  explicit RandomChooser(uint64_t seed);
  int choose(const double* probs, int n) override;
  int choose_f32(const float* weights, int n) override;  // same draws as choose() on the widened weights
  uint64_t next_u64();
  double uniform();  // in [0, 1), 53 random bits

 private:
  uint64_t state_[4];
};

// One token from a target row (logits: [vocab]): argmax at temperature 0, else a draw through `chooser` from the
// processed distribution (distribution.h). probs: [vocab] scratch. Plain decoding and prefill's first token use it.
int32_t sample_token(const float* logits, int vocab, const SamplingParams& params, Chooser& chooser,
                     std::vector<double>& probs);

}  // namespace ts
