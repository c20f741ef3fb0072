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

}  // namespace ts::spec
