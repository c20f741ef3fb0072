// Random tiny target/drafter pairs for engine tests, and the exact distribution of short continuations.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/drafter.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"
#include "model/target_model.h"
#include "sampling/distribution.h"

namespace ts::testing {

struct Pair {
  std::unique_ptr<TargetModel> target;
  std::unique_ptr<Drafter> drafter;
};

using ::ts::tiny_drafter_config;  // model/random_checkpoint.h

// Writes random weights for target config c and drafter config d under a new temp folder and loads the pair.
inline Pair write_and_load_pair(const std::string& name, const ModelConfig& c, const DrafterConfig& d, DType dtype,
                                uint64_t seed) {
  const std::string dir = temp_dir(name);
  write_random_model(dir + "/target", c, dtype, seed);
  write_random_drafter(dir + "/drafter", d, dtype, seed + 1);
  auto target = TargetModel::load(dir + "/target");
  auto drafter = Drafter::load(dir + "/drafter", target->config());
  return Pair{std::move(target), std::move(drafter)};
}

// A random Qwen3-shaped target (vocab, hidden, layers) and a DSpark drafter of block size `block` over it.
inline Pair make_pair(int vocab, int hidden, int layers, int block, DType dtype, uint64_t seed) {
  return write_and_load_pair("pair", tiny_qwen3_config(vocab, hidden, layers),
                             tiny_drafter_config(vocab, hidden, layers, block), dtype, seed);
}

// Greedy target-only continuation of `prompt`, one token per forward (the reference every mode must equal).
inline std::vector<int32_t> greedy_reference(TargetModel& m, const std::vector<int32_t>& prompt, int n) {
  KVCache cache = m.new_cache(int(prompt.size()) + n + 1);
  std::vector<int32_t> out;
  ForwardBatch b;
  b.tokens = prompt;
  for (int i = 0; i < int(prompt.size()); ++i) b.positions.push_back(i);
  b.logit_rows = {int(prompt.size()) - 1};
  ForwardResult r;
  for (int step = 0; step < n; ++step) {
    m.forward(b, {&cache}, &r);
    cache.commit_all();
    const int32_t next = argmax(r.logits.data(), m.config().vocab_size);
    out.push_back(next);
    b.tokens = {next};
    b.positions = {cache.length()};
    b.logit_rows = {0};
  }
  return out;
}

// Exact distribution of the next `len` tokens after `prompt` under the target with `params`, by enumeration.
// edit_row, when set, edits each row's logits ([vocab]) before the processors, given the tokens generated so far.
using RowEdit = std::function<void(const std::vector<int32_t>& generated, float* logits)>;
inline void exact_continuations(TargetModel& m, const std::vector<int32_t>& prompt, int len,
                                const SamplingParams& params, std::map<std::vector<int32_t>, double>* out,
                                const RowEdit& edit_row = nullptr) {
  const int V = m.config().vocab_size;
  std::vector<std::pair<std::vector<int32_t>, double>> frontier = {{{}, 1.0}};
  for (int step = 0; step < len; ++step) {
    std::vector<std::pair<std::vector<int32_t>, double>> next;
    for (auto& [suffix, mass] : frontier) {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), suffix.begin(), suffix.end());
      KVCache cache = m.new_cache(64);
      ForwardBatch b;
      b.tokens = seq;
      for (int i = 0; i < int(seq.size()); ++i) b.positions.push_back(i);
      b.logit_rows = {int(seq.size()) - 1};
      ForwardResult r;
      m.forward(b, {&cache}, &r);
      if (edit_row) edit_row(suffix, r.logits.data());
      std::vector<double> p;
      processed_distribution(r.logits.data(), V, params, &p);
      for (int v = 0; v < V; ++v) {
        if (p[v] == 0) continue;
        auto s = suffix;
        s.push_back(v);
        next.push_back({s, mass * p[v]});
      }
    }
    frontier.swap(next);
  }
  for (auto& [s, mass] : frontier) (*out)[s] += mass;
}

// Sampled continuations and their probabilities (exact ones from exact_continuations, or observed frequencies).
using Continuations = std::map<std::vector<int32_t>, double>;

// Total variation between the exact distribution and N samples' frequencies, and the bound a lossless sampler stays
// under: 1.5 x the sum of per-cell standard errors (half of each sqrt(p (1 - p) / N), TV being half of L1) + 0.01.
inline std::pair<double, double> tv_and_bound(const Continuations& exact, const Continuations& got, int N) {
  double bound = 0, tv = 0;
  for (const auto& [s, p] : exact) {
    bound += 0.5 * std::sqrt(p * (1 - p) / N);
    const auto it = got.find(s);
    tv += 0.5 * std::fabs(p - (it == got.end() ? 0.0 : it->second));
  }
  for (const auto& [s, q] : got)
    if (!exact.count(s)) tv += 0.5 * q;
  return {tv, 1.5 * bound + 0.01};
}

}  // namespace ts::testing
