// A synthetic target/drafter pair for the spec tests: no model weights, every distribution a deterministic
// function of its inputs, so exact target distributions can be computed independently of the code under test.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/distribution.h"
#include "spec_decode/draft_source.h"
#include "spec_decode/draft_tree.h"
#include "spec_decode/expand.h"

namespace ts::spec_decode::testing {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t hash_tokens(const std::vector<int32_t>& tokens, uint64_t salt) {
  uint64_t h = mix64(salt);
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint64_t>(t + 1));
  return h;
}

// Uniform in [-1, 1) from (h, i).
inline float hashed_uniform(uint64_t h, uint64_t i) {
  return static_cast<float>(static_cast<double>(mix64(h ^ mix64(i)) >> 11) * 0x1.0p-52 - 1.0);
}

// Target logits = scale * uniform(hash(context), token): the distribution depends on the whole path.
struct SyntheticTarget {
  int vocab = 6;
  float scale = 2.5f;
  uint64_t salt = 1;

  void logits(const std::vector<int32_t>& context, float* out) const {  // out: [vocab]
    const uint64_t h = hash_tokens(context, salt);
    for (int i = 0; i < vocab; ++i) out[i] = scale * hashed_uniform(h, i);
  }
  std::vector<double> processed(const std::vector<int32_t>& context, const SamplingParams& params) const {
    std::vector<float> row(vocab);
    logits(context, row.data());
    std::vector<double> p;
    processed_distribution(row.data(), vocab, params, &p);
    return p;
  }
  std::vector<int32_t> greedy_continuation(std::vector<int32_t> context, int n) const {
    std::vector<int32_t> out;
    std::vector<float> row(vocab);
    for (int i = 0; i < n; ++i) {
      logits(context, row.data());
      out.push_back(argmax(row.data(), vocab));
      context.push_back(out.back());
    }
    return out;
  }
};

// A block drafter with a Markov head: conditional logits U[d-1] + W2 * W1[parent].
//   base: [block_size, vocab]; w1, w2: [vocab, rank]
struct SyntheticDrafter {
  int vocab = 6, block_size = 3, rank = 2;
  std::vector<float> base, w1, w2;

  static SyntheticDrafter random(int vocab, int block_size, int rank, uint64_t seed, float base_scale = 2,
                                 float markov_scale = 1.5f) {
    SyntheticDrafter d;
    d.vocab = vocab;
    d.block_size = block_size;
    d.rank = rank;
    d.base.resize(static_cast<size_t>(block_size) * vocab);
    d.w1.resize(static_cast<size_t>(vocab) * rank);
    d.w2.resize(static_cast<size_t>(vocab) * rank);
    for (size_t i = 0; i < d.base.size(); ++i) d.base[i] = base_scale * hashed_uniform(seed, i);
    for (size_t i = 0; i < d.w1.size(); ++i) d.w1[i] = markov_scale * hashed_uniform(seed + 1, i);
    for (size_t i = 0; i < d.w2.size(); ++i) d.w2[i] = hashed_uniform(seed + 2, i);
    return d;
  }

  // This round's base logits follow the target's greedy continuation of context (scaled, plus noise), so that
  // drafts are often accepted; any drafter is valid for losslessness.
  void inform(const SyntheticTarget& target, const std::vector<int32_t>& context, float target_weight,
              float noise_scale) {
    const std::vector<int32_t> greedy = target.greedy_continuation(context, block_size - 1);
    std::vector<int32_t> ctx = context;
    std::vector<float> row(vocab);
    const uint64_t h = hash_tokens(context, 777);
    for (int d = 0; d < block_size; ++d) {
      target.logits(ctx, row.data());
      for (int v = 0; v < vocab; ++v) {
        base[static_cast<size_t>(d) * vocab + v] = target_weight * row[v] + noise_scale * hashed_uniform(h + d, v);
      }
      if (d < block_size - 1) ctx.push_back(greedy[d]);
    }
  }

  DraftSource source() const {
    DraftSource s;
    s.vocab = vocab;
    s.block_size = block_size;
    s.conditional_logits = [this](int depth, int32_t parent, float* out) {
      for (int v = 0; v < vocab; ++v) {
        float markov = 0;
        for (int r = 0; r < rank; ++r) markov += w2[static_cast<size_t>(v) * rank + r] * w1[static_cast<size_t>(parent) * rank + r];
        out[v] = base[static_cast<size_t>(depth - 1) * vocab + v] + markov;
      }
    };
    s.base_logits = [this](int depth, float* out) {
      for (int v = 0; v < vocab; ++v) out[v] = base[static_cast<size_t>(depth - 1) * vocab + v];
    };
    return s;
  }
};

// The target under a request's sampling penalties (request.h: presence, frequency, repetition), written out
// independently of sampling/penalties.cc: the row after `context` counts the tokens after its first prompt_length
// as generated, so in a draft tree each node's processed distribution depends on the node's own path.
struct PenalizedTarget {
  SyntheticTarget raw;
  int vocab = 0;
  float presence = 0, frequency = 0, repetition = 1;
  size_t prompt_length = 0;

  void logits(const std::vector<int32_t>& context, float* out) const {  // out: [vocab]
    raw.logits(context, out);
    std::vector<int> count(static_cast<size_t>(vocab), 0);
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (size_t i = 0; i < context.size(); ++i) {
      seen[static_cast<size_t>(context[i])] = true;
      if (i >= prompt_length) ++count[static_cast<size_t>(context[i])];
    }
    for (int t = 0; t < vocab; ++t) {
      if (seen[static_cast<size_t>(t)]) out[t] = out[t] > 0 ? out[t] / repetition : out[t] * repetition;
      const int c = count[static_cast<size_t>(t)];
      out[t] -= frequency * static_cast<float>(c);
      out[t] -= c > 0 ? presence : 0.0f;
    }
  }
  std::vector<double> processed(const std::vector<int32_t>& context, const SamplingParams& params) const {
    std::vector<float> row(vocab);
    logits(context, row.data());
    std::vector<double> p;
    processed_distribution(row.data(), vocab, params, &p);
    return p;
  }
};

// The verify() input: row i = target logits after context (which ends with the anchor) + the path to node i.
// Target: SyntheticTarget or any type with its vocab and logits(context, out).
template <class Target>
std::vector<float> tree_target_logits(const Target& target, const std::vector<int32_t>& context,
                                      const DraftTree& tree) {
  const int n = tree.size();
  std::vector<float> rows(static_cast<size_t>(n) * target.vocab);  // [n, vocab]
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> path;
    for (int j = i; j > 0; j = tree.parent[j]) path.push_back(tree.token[j]);
    std::vector<int32_t> ctx = context;
    ctx.insert(ctx.end(), path.rbegin(), path.rend());
    target.logits(ctx, &rows[static_cast<size_t>(i) * target.vocab]);
  }
  return rows;
}

// A round's price from a table of (k, ms) at one batch: piecewise linear in k, extrapolated with the first and last
// segments, plus node_ms per node; the engine's CostModel prices rounds the same way (engine/cost_model.h), but the
// method's tests do not depend on the engine.
inline RoundCost table_round_cost(std::vector<int> tokens, std::vector<double> ms, double node_ms = 0) {
  return [tokens = std::move(tokens), ms = std::move(ms), node_ms](int k) {
    size_t j = 1;
    while (j + 1 < tokens.size() && tokens[j] < k) ++j;
    const double slope = (ms[j] - ms[j - 1]) / double(tokens[j] - tokens[j - 1]);
    return ms[j - 1] + slope * double(k - tokens[j - 1]) + node_ms * double(k - 1);
  };
}

}  // namespace ts::spec_decode::testing
