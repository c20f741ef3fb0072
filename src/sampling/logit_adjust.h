// Per-request edits of the raw target logits, applied before the processors of distribution.h (temperature,
// top-k, top-p, min-p): an additive logit bias (OpenAI's logit_bias) and, while fewer than min_tokens tokens have
// been generated, -inf on the stop ids (vLLM's min_tokens). Speculative decoding stays lossless with respect to
// the distribution these edited logits define, provided every target row is edited for the token it predicts: in
// a draft tree the row of a node at depth d predicts token number generated_before_round + d (0-based), so the
// min_tokens mask depends on the node's depth. The drafter's logits get the same edits (not needed for
// losslessness, since any q with support where it draws is exact, but a banned or strongly biased token drafted
// from unedited q would just be rejected).
//
// Order with the sampling penalties (penalties.h): these edits first, then repetition, frequency and presence
// penalties, as vLLM v1's sampler does (its min_tokens and logit_bias processors run before apply_penalties); then
// the processors of distribution.h. Logprobs (logprobs.h) are taken after all of them, before temperature.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ts {

// Which edits one row gets.
struct LogitEdits {
  const std::vector<std::pair<int32_t, float>>* bias = nullptr;  // [n] (token id, added logit); null = none
  const std::vector<int32_t>* banned = nullptr;  // [m] token ids set to -inf (ids outside [0, vocab) ignored)
  bool empty() const { return (!bias || bias->empty()) && (!banned || banned->empty()); }
};

// The edits for the row that predicts generated token number token_index (0-based: tokens generated before it):
// the bias always, the stop ids banned while token_index < min_tokens.
inline LogitEdits logit_edits_at(const std::vector<std::pair<int32_t, float>>& bias,
                                 const std::vector<int32_t>& stop_ids, int min_tokens, int64_t token_index) {
  return LogitEdits{&bias, token_index < min_tokens ? &stop_ids : nullptr};
}

// logits: [vocab], edited in place: bias entries added in order (a repeated id adds twice), then banned ids set to
// -inf. Bias ids must be in [0, vocab) (the engine validates them); throws ts::Error otherwise.
void apply_logit_edits(const LogitEdits& edits, int vocab, float* logits);

}  // namespace ts
