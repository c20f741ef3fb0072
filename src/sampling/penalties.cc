#include "sampling/penalties.h"

#include "core/error.h"

namespace ts {

float penalized_logit(float logit, int generated_count, bool in_prompt, const PenaltyParams& params) {
  if (in_prompt || generated_count > 0) logit = logit > 0 ? logit / params.repetition : logit * params.repetition;
  if (generated_count > 0) logit = logit - params.frequency * float(generated_count) - params.presence;
  return logit;
}

PenaltyHistory::PenaltyHistory(const PenaltyParams& params, const std::vector<int32_t>& prompt)
    : params_(params), active_(!params.neutral()) {
  // Prompt tokens matter only to the repetition penalty: without it they are not kept (nor visited per row).
  if (!active_ || params.repetition == 1) return;
  for (int32_t token : prompt) {
    const int32_t s = slot_of(token);
    in_prompt_[size_t(s)] = 1;
  }
}

int32_t PenaltyHistory::slot_of(int32_t token) {
  TS_CHECK(token >= 0, "penalties: negative token id ", token);
  auto [it, added] = slot_.try_emplace(token, int32_t(ids_.size()));
  if (added) {
    ids_.push_back(token);
    generated_.push_back(0);
    in_prompt_.push_back(0);
    if (token > largest_id_) largest_id_ = token;
  }
  return it->second;
}

int PenaltyHistory::generated_count(int32_t token) const {
  auto it = slot_.find(token);
  return it == slot_.end() ? 0 : generated_[size_t(it->second)];
}

void PenaltyHistory::add_generated(int32_t token) {
  if (!active_) return;
  ++generated_[size_t(slot_of(token))];
}

void PenaltyHistory::apply(const int32_t* path, int path_len, int vocab, float* logits) const {
  if (!active_) return;
  TS_CHECK(largest_id_ < vocab, "penalties: token id ", largest_id_, " outside the vocabulary [0, ", vocab, ")");
  // The path tokens' logits before any edit: a path token is penalized once, from its raw value, with its full
  // count (generated + path), exactly as the plain row after those tokens would be.
  constexpr int kInlinePath = 64;
  float saved_inline[kInlinePath];  // [path_len] when it fits
  std::vector<float> saved_heap;
  float* saved = saved_inline;
  if (path_len > kInlinePath) {
    saved_heap.resize(size_t(path_len));
    saved = saved_heap.data();
  }
  for (int i = 0; i < path_len; ++i) {
    TS_CHECK(path[i] >= 0 && path[i] < vocab, "penalties: path token id ", path[i], " outside the vocabulary [0, ",
             vocab, ")");
    saved[i] = logits[path[i]];
  }
  for (size_t s = 0; s < ids_.size(); ++s)
    logits[ids_[s]] = penalized_logit(logits[ids_[s]], generated_[s], in_prompt_[s] != 0, params_);
  for (int i = 0; i < path_len; ++i) {
    const int32_t token = path[i];
    bool first = true;  // only a token's first occurrence on the path edits its logit
    for (int j = 0; j < i && first; ++j) first = path[j] != token;
    if (!first) continue;
    int on_path = 1;
    for (int j = i + 1; j < path_len; ++j) on_path += path[j] == token;
    auto it = slot_.find(token);
    const int generated = it == slot_.end() ? 0 : generated_[size_t(it->second)];
    const bool in_prompt = it != slot_.end() && in_prompt_[size_t(it->second)] != 0;
    logits[token] = penalized_logit(saved[i], generated + on_path, in_prompt, params_);
  }
}

void PenaltyHistory::apply_to_tree(const int32_t* token, const int32_t* parent, int n, int vocab,
                                   float* rows) const {
  if (!active_) return;
  std::vector<int32_t> path;  // [depth of the node] its draft tokens, deepest first
  for (int node = 0; node < n; ++node) {
    path.clear();
    for (int j = node; j > 0; j = parent[j]) {
      TS_CHECK(parent[j] >= 0 && parent[j] < j, "penalties: node ", j, " has parent ", parent[j],
               " (parents must precede their children)");
      path.push_back(token[j]);
    }
    apply(path.data(), int(path.size()), vocab, rows + size_t(node) * vocab);
  }
}

}  // namespace ts
