// Log-probabilities reported with emitted tokens (OpenAI's logprobs / top_logprobs).
//
// Definition: log_softmax of the target's logits for the position AFTER all of the request's logit edits
// (logit_bias and the min_tokens stop mask, logit_adjust.h; then the presence, frequency and repetition penalties,
// penalties.h) and BEFORE temperature, top-k, top-p and min-p. This is what vLLM returns by default (logprobs_mode
// "raw_logprobs": the model's log_softmax before the sampling processors) plus the edits, which change what the
// request may emit: the penalties count as edits (vLLM's "processed_logprobs" include them too, but are taken
// after temperature and the filters as well). It does not depend on the temperature, so greedy and sampled requests report the same kind of
// number, a greedy token is always the top entry, and a token the processors cut can still show in the top list.
// A banned token (-inf logit) has logprob -inf.
//
// Computed in double from the float row in one fixed order (the same bits for the same row on every ISA), so a
// speculative run reports exactly the values of a plain run: verified tree rows equal plain-decoding rows.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ts {

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit on top_logprobs

struct TokenLogprobs {
  float logprob = 0;                          // of the emitted token
  std::vector<std::pair<int32_t, float>> top;  // [k] (token id, logprob), logprob descending, lower id first on ties
};

// logits: [vocab] (already edited). token in [0, vocab); top_n in [0, kMaxTopLogprobs] (clamped to vocab).
// Throws ts::Error on NaN or when no logit is finite.
TokenLogprobs token_logprobs(const float* logits, int vocab, int32_t token, int top_n);

}  // namespace ts
