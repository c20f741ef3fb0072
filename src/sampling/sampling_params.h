// The request's sampling parameters, as the target's processed distribution sees them.
#pragma once

#include <cstdint>

namespace ts {

struct SamplingParams {
  float temperature = 0;  // 0 = greedy (one-hot argmax); > 0 = sample from softmax(logits / temperature)
  int top_k = 0;          // 0 = off; else keep tokens whose logit >= the k-th largest (ties at the edge kept)
  float top_p = 1;        // 1 = off; else keep the smallest top set whose mass reaches top_p (in (0, 1])
  float min_p = 0;        // 0 = off; else drop tokens with prob < min_p * max prob (in [0, 1])
  uint64_t seed = 0;      // seeds the request's RandomChooser
};

// Throws ts::Error unless every field is in range (temperature >= 0 and finite, top_k >= 0, top_p in (0, 1],
// min_p in [0, 1]).
void validate_sampling_params(const SamplingParams& params);

}  // namespace ts
