#include "spec/draft_source.h"

#include "core/error.h"
#include "sampling/softmax_f32.h"

namespace ts::spec {

void draft_probs_f32(const DraftSource& source, QSource q_source, int child_depth, int32_t parent_token,
                     float temperature, float* probs) {
  TS_CHECK(child_depth >= 1 && child_depth <= source.block_size, "draft q: child depth must be in [1, ",
           source.block_size, "], got ", child_depth);
  if (q_source == QSource::Conditional) {
    TS_CHECK(source.conditional_logits, "draft q: DraftSource.conditional_logits is not set");
    source.conditional_logits(child_depth, parent_token, probs);
  } else {
    TS_CHECK(source.base_logits, "draft q: DraftSource.base_logits is not set");
    source.base_logits(child_depth, probs);
  }
  // Float softmax in place: vectorised, since expansion computes one per tree node over the whole vocabulary.
  softmax_f32(probs, source.vocab, temperature > 0 ? 1.0f / temperature : 1.0f, probs);
}

void draft_distribution(const DraftSource& source, QSource q_source, int child_depth, int32_t parent_token,
                        float temperature, std::vector<float>* logits_scratch, std::vector<double>* q) {
  logits_scratch->resize(source.vocab);
  draft_probs_f32(source, q_source, child_depth, parent_token, temperature, logits_scratch->data());
  q->assign(logits_scratch->begin(), logits_scratch->end());  // widen: remove_drawn and ratios work in double
}

double remove_drawn(const std::vector<double>& q, std::span<const int32_t> drawn, std::vector<double>* q_j) {
  *q_j = q;
  for (int32_t t : drawn) (*q_j)[t] = 0;
  double remaining = 0;  // summed over the vocabulary (not 1 - drawn mass) to avoid cancellation
  for (double v : *q_j) remaining += v;
  if (remaining > 0) {
    for (double& v : *q_j) v /= remaining;
  }
  return remaining;
}

}  // namespace ts::spec
