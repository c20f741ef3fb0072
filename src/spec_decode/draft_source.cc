#include "spec_decode/draft_source.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/error.h"
#include "sampling/softmax_f32.h"

namespace ts::spec_decode {

void apply_draft_filter(const DraftFilter& filter, int vocab, float* probs) {
  TS_CHECK(filter.top_k >= 0 && filter.top_p > 0 && filter.top_p <= 1 && filter.min_p >= 0 && filter.min_p <= 1,
           "draft filter: expected top_k >= 0, top_p in (0, 1], min_p in [0, 1], got ", filter.top_k, ", ",
           filter.top_p, ", ", filter.min_p);
  if (!filter.active()) return;
  bool removed = false;
  if (filter.top_k > 0 && filter.top_k < vocab) {
    // The k-th largest value: one pass keeping the k largest seen in a small sorted list (blocks with nothing
    // above its smallest entry are skipped by a compare the compiler vectorises), nth_element for large k.
    float kth;
    thread_local std::vector<float> largest;  // [k] descending
    const int k = filter.top_k;
    if (k <= 256) {
      largest.assign(probs, probs + k);
      std::sort(largest.begin(), largest.end(), std::greater<float>());
      constexpr int kScan = 16;
      for (int t = k; t < vocab; ++t) {
        if ((t - k) % kScan == 0 && t + kScan <= vocab) {
          bool any_above = false;
          for (int j = 0; j < kScan; ++j) any_above |= probs[t + j] > largest[k - 1];
          if (!any_above) {
            t += kScan - 1;
            continue;
          }
        }
        const float v = probs[t];
        if (!(v > largest[k - 1])) continue;
        int pos = k - 1;
        while (pos > 0 && largest[pos - 1] < v) {
          largest[pos] = largest[pos - 1];
          --pos;
        }
        largest[pos] = v;
      }
      kth = largest[k - 1];
    } else {
      largest.assign(probs, probs + vocab);
      std::nth_element(largest.begin(), largest.begin() + (k - 1), largest.end(), std::greater<float>());
      kth = largest[k - 1];
    }
    for (int t = 0; t < vocab; ++t)
      if (probs[t] < kth) probs[t] = 0, removed = true;
  }
  if (filter.top_p < 1) {
    thread_local std::vector<int> order;  // surviving tokens, a growing prefix sorted by (q desc, index asc)
    order.clear();
    double total = 0;
    for (int t = 0; t < vocab; ++t)
      if (probs[t] > 0) order.push_back(t), total += probs[t];
    const int count = int(order.size());
    const auto by_q_desc = [&](int a, int b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); };
    const double target = double(filter.top_p) * total;
    int kept = count;
    for (int m = std::min(count, 64);; m = std::min(count, m * 4)) {
      std::partial_sort(order.begin(), order.begin() + m, order.end(), by_q_desc);
      double mass = 0;
      int i = 0;
      for (; i < m && mass < target; ++i) mass += probs[order[i]];
      if (i < m || m == count) {
        kept = i;
        break;
      }
    }
    for (int i = kept; i < count; ++i) probs[order[i]] = 0, removed = true;
  }
  if (filter.min_p > 0) {
    const float floor = filter.min_p * *std::max_element(probs, probs + vocab);
    for (int t = 0; t < vocab; ++t)
      if (probs[t] < floor && probs[t] > 0) probs[t] = 0, removed = true;
  }
  if (!removed) return;
  double sum = 0;
  for (int t = 0; t < vocab; ++t) sum += probs[t];
  const float inv = float(1 / sum);  // the largest token always survives: sum > 0
  for (int t = 0; t < vocab; ++t) probs[t] *= inv;
}

void draft_probs_f32(const DraftSource& source, QSource q_source, int child_depth, int32_t parent_token,
                     float temperature, float* probs, const DraftFilter& filter) {
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
  if (temperature > 0) apply_draft_filter(filter, source.vocab, probs);
}

}  // namespace ts::spec_decode
