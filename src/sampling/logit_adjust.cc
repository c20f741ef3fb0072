#include "sampling/logit_adjust.h"

#include <limits>

#include "core/error.h"

namespace ts {

void apply_logit_edits(const LogitEdits& edits, int vocab, float* logits) {
  if (edits.bias) {
    for (const auto& [id, add] : *edits.bias) {
      TS_CHECK(id >= 0 && id < vocab, "logit_bias: token id ", id, " outside the vocabulary [0, ", vocab, ")");
      logits[id] += add;
    }
  }
  if (edits.banned) {
    for (int32_t id : *edits.banned)
      if (id >= 0 && id < vocab) logits[id] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace ts
