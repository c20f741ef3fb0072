// The target's processed distribution p, which lossless speculative decoding must reproduce exactly.
//
// Order of the processors (the Hugging Face warper order): temperature -> top_k -> top_p -> min_p, then
// renormalise. Exactly:
//   1. z = logits / temperature (in double).
//   2. top_k > 0: keep tokens with z >= the k-th largest z (every token tied with the k-th is kept, as HF's
//      `scores < topk[-1]` does); the rest get probability 0.
//   3. p = softmax(z) over the kept tokens.
//   4. top_p < 1: order kept tokens by p descending (lower index first on ties); keep a token iff the mass of the
//      tokens strictly before it is < top_p (the first token is always kept). Same as HF's "remove if cumulative
//      ascending mass <= 1 - top_p" up to tie order.
//   5. min_p > 0: drop tokens with p < min_p * max p (the max is always kept).
//   6. renormalise.
// temperature == 0 gives the one-hot distribution on argmax(logits) (lowest index on ties); the other processors
// cannot change the argmax, so they are ignored.
#pragma once

#include <vector>

#include "sampling/sampling_params.h"

namespace ts {

// logits: [vocab]; probs: resized to [vocab]. Throws ts::Error on bad params or when no logit is finite.
void processed_distribution(const float* logits, int vocab, const SamplingParams& params, std::vector<double>* probs);

// Index of the largest element of x: [n], lowest index on ties (NaN never wins unless x[0] is NaN).
int argmax(const float* x, int n);

// out[i] = softmax(logits / temperature)[i] in double; logits: [vocab], out resized to [vocab].
// -inf logits get probability 0. Throws ts::Error when no logit is finite or temperature <= 0.
void softmax_with_temperature(const float* logits, int vocab, double temperature, std::vector<double>* out);

// out[i] = exp(x[i]) for x[i] <= 0 (including -inf -> 0); x, out: [n] (out may alias x). Within 2 ulp of the
// correctly rounded value (tests/sampling compares with std::exp); the same bits on every ISA (plain adds and
// multiplies, no FMA contraction). Runs the active ISA variant's pass (kernels::exp_nonpositive_f64): this is the
// softmax of processed_distribution, one exp per vocabulary entry per target row.
void exp_nonpositive(const double* x, int n, double* out);

}  // namespace ts
