#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "sampling/distribution.h"

namespace ts {

TokenLogprobs token_logprobs(const float* logits, int vocab, int32_t token, int top_n) {
  TS_CHECK(vocab > 0 && token >= 0 && token < vocab, "logprobs: token ", token, " outside [0, ", vocab, ")");
  TS_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs, "logprobs: top_n must be in [0, ", kMaxTopLogprobs, "], got ",
           top_n);
  float largest = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    TS_CHECK(!std::isnan(logits[i]), "logprobs: logit ", i, " is NaN");
    largest = logits[i] > largest ? logits[i] : largest;
  }
  TS_CHECK(std::isfinite(largest), "logprobs: no finite logit");
  // log_softmax(x)_i = x_i - (max + log sum_j exp(x_j - max)), in double.
  thread_local std::vector<double> shifted;  // [vocab] x - max, then exp of it
  shifted.resize(vocab);
  for (int i = 0; i < vocab; ++i) shifted[i] = double(logits[i]) - double(largest);
  exp_nonpositive(shifted.data(), vocab, shifted.data());
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += shifted[i];
  const double log_normaliser = double(largest) + std::log(sum);
  const auto logprob_of = [&](int i) { return float(double(logits[i]) - log_normaliser); };

  TokenLogprobs out;
  out.logprob = logprob_of(token);
  const int n = std::min(top_n, vocab);
  if (n == 0) return out;
  // The n largest logits in one pass: a small list kept sorted by (logit desc, id asc); a later id never displaces
  // an equal earlier one.
  std::vector<int32_t> best;  // [<= n] token ids
  best.reserve(n + 1);
  for (int i = 0; i < vocab; ++i) {
    if (int(best.size()) == n && !(logits[i] > logits[best.back()])) continue;
    int pos = int(best.size());
    while (pos > 0 && logits[best[pos - 1]] < logits[i]) --pos;
    best.insert(best.begin() + pos, i);
    if (int(best.size()) > n) best.pop_back();
  }
  out.top.reserve(n);
  for (int32_t id : best) out.top.emplace_back(id, logprob_of(id));
  return out;
}

}  // namespace ts
