// Sampling penalties on the target's logits: OpenAI's presence and frequency penalties over the tokens the request
// has generated, and vLLM's / Hugging Face's repetition penalty over every token of the prompt and the generated
// text. For a token t with count c among the generated tokens (the prompt does not count):
//
//   seen in the prompt or c > 0:  logit = logit > 0 ? logit / repetition : logit * repetition
//   c > 0:                        logit = logit - frequency * c - presence
//
// Order of all per-request edits (vLLM v1's sampler, sampler.py: min_tokens and logit_bias processors, then
// repetition, frequency, presence): logit_bias, the min_tokens stop mask (logit_adjust.h), then these penalties,
// then temperature and top-k / top-p / min-p (distribution.h). A masked token stays -inf. A biased token's logit is
// scaled by the repetition penalty with its bias, as in vLLM.
//
// Under speculation the penalties depend on the path: the target row of a draft-tree node predicts the token after
// the generated tokens plus the draft tokens on the path from the root's child down to that node, so its counts
// are the generated counts plus that path's. Each row gets its own edits (apply with the node's path,
// apply_to_tree for a whole tree), computed with the same arithmetic as the row a plain step edits after those
// tokens were generated: a verified tree row stays bit-identical to the plain row.
//
// Cost: only tokens seen so far are touched. A row costs O(distinct tokens in the history + path length^2), never
// O(vocab); an inactive history (all three penalties neutral) costs nothing and keeps no tokens.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace ts {

struct PenaltyParams {
  float presence = 0;    // OpenAI presence_penalty, in [-2, 2]; 0 = off
  float frequency = 0;   // OpenAI frequency_penalty, in [-2, 2]; 0 = off
  float repetition = 1;  // vLLM / HF repetition_penalty, in (0, 10]; 1 = off (> 1 discourages repeats)
  bool neutral() const { return presence == 0 && frequency == 0 && repetition == 1; }
};

// One token's penalized logit. generated_count: its count among the generated tokens (path included);
// in_prompt: it occurs in the prompt. The one definition every row uses.
float penalized_logit(float logit, int generated_count, bool in_prompt, const PenaltyParams& params);

// The tokens a request's penalties read, kept incrementally: each distinct generated token with its count, and
// with a repetition penalty each distinct prompt token. Default-constructed or built from neutral params it is
// inactive: add_generated and apply do nothing.
class PenaltyHistory {
 public:
  PenaltyHistory() = default;
  // prompt token ids must be >= 0 (the engine validates them against the vocabulary).
  PenaltyHistory(const PenaltyParams& params, const std::vector<int32_t>& prompt);

  bool active() const { return active_; }
  const PenaltyParams& params() const { return params_; }
  int distinct_tokens() const { return int(ids_.size()); }
  int generated_count(int32_t token) const;  // 0 for a token not generated

  // A token was generated (emitted): its count rises by one.
  void add_generated(int32_t token);

  // logits: [vocab], edited in place for the row that predicts the token after the generated tokens followed by
  // path[0..path_len) (the draft tokens between the last generated token and this row; their order does not
  // matter). Every history and path token must be in [0, vocab); throws ts::Error otherwise.
  void apply(const int32_t* path, int path_len, int vocab, float* logits) const;

  // The rows of a draft tree, each with its own path. token, parent: [n] (node 0 the root, whose token is the last
  // generated one and is already in the history; parents precede children, parent[0] = -1); rows: [n, vocab], row
  // i the target's logits after the path root..i.
  void apply_to_tree(const int32_t* token, const int32_t* parent, int n, int vocab, float* rows) const;

 private:
  PenaltyParams params_;
  bool active_ = false;
  std::vector<int32_t> ids_;              // [distinct] tokens of the generated text (and of the prompt with repetition)
  std::vector<int32_t> generated_;        // [distinct] count of ids_[s] among the generated tokens
  std::vector<uint8_t> in_prompt_;        // [distinct] 1 iff ids_[s] occurs in the prompt
  std::unordered_map<int32_t, int32_t> slot_;  // token id -> its index s in the arrays above
  int32_t largest_id_ = -1;               // the largest id in ids_ (checked against vocab once per row)

  int32_t slot_of(int32_t token);  // adds an empty slot when the token is new
};

}  // namespace ts
