// Per-request logit_bias, min_tokens and logprobs through the engine (request.h): in plain, chain and tree modes
// the greedy tokens equal an independent target-only reference over the edited logits, a -100 bias bans the token
// greedy decoding would emit, min_tokens keeps stop ids out until enough tokens exist, logprobs are the same in
// every mode (and equal log_softmax of a plain forward over the same prefix), sampled trees keep the edited target
// distribution, and bad values are rejected naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/mapped_file.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_bundle.h"
#include "engine/test_subjects.h"
#include "engine/tiny_pair.h"

namespace ts {
namespace {

using testing::make_pair;
using testing::Pair;

// The edits of request.h, written out independently of src/sampling/logit_adjust.cc. row: [vocab]
void edit_row(const RequestOptions& o, int64_t token_index, float* row) {
  for (const auto& [id, bias] : o.logit_bias) row[id] += bias;
  if (token_index < o.min_tokens)
    for (int32_t id : o.stop_ids) row[id] = -std::numeric_limits<float>::infinity();
}

// log_softmax(row)[t] in long double. row: [vocab]
double reference_logprob(const std::vector<float>& row, int32_t t) {
  const float largest = *std::max_element(row.begin(), row.end());
  long double sum = 0;
  for (float x : row) sum += std::exp((long double)x - largest);
  return double((long double)row[t] - largest - std::log(sum));
}

struct Reference {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> rows;  // [ids.size()][vocab] the edited row each token was chosen from
};

// Target-only decoding, one token per forward, over edited logits: greedy argmax (first maximum), or the given
// tokens (`forced`, teacher forcing: the rows then are those of a plain forward over each prefix). Ends after a
// stop id or max_new_tokens.
Reference edited_reference(TargetModel& m, const std::vector<int32_t>& prompt, const RequestOptions& o,
                           const std::vector<int32_t>& forced = {}) {
  const int V = m.config().vocab_size;
  const int n = forced.empty() ? o.max_new_tokens : int(forced.size());
  KVCache cache = m.new_cache(int(prompt.size()) + n + 1);
  ForwardBatch b;
  b.tokens = prompt;
  for (int i = 0; i < int(prompt.size()); ++i) b.positions.push_back(i);
  b.logit_rows = {int(prompt.size()) - 1};
  ForwardResult r;
  Reference ref;
  for (int step = 0; step < n; ++step) {
    m.forward(b, {&cache}, &r);
    cache.commit_all();
    std::vector<float> row(r.logits.begin(), r.logits.begin() + V);
    edit_row(o, step, row.data());
    const int32_t next =
        forced.empty() ? int32_t(std::max_element(row.begin(), row.end()) - row.begin()) : forced[size_t(step)];
    ref.ids.push_back(next);
    ref.rows.push_back(row);
    if (forced.empty() && std::count(o.stop_ids.begin(), o.stop_ids.end(), next)) break;
    b.tokens = {next};
    b.positions = {cache.length()};
    b.logit_rows = {0};
  }
  return ref;
}

// Every reported logprob (and top entry) is log_softmax of the reference row, within 1e-5; the top list has k
// entries, descending, and contains the emitted token whenever it ranks among the top k.
void expect_logprobs_match(const GenerationResult& got, const Reference& ref, int k, const std::string& what) {
  ASSERT_EQ(got.logprobs.size(), got.ids.size()) << what;
  ASSERT_LE(got.ids.size(), ref.rows.size()) << what;
  for (size_t i = 0; i < got.ids.size(); ++i) {
    const TokenLogprobs& lp = got.logprobs[i];
    const std::vector<float>& row = ref.rows[i];
    EXPECT_NEAR(lp.logprob, reference_logprob(row, got.ids[i]), 1e-5) << what << " token " << i;
    ASSERT_EQ(int(lp.top.size()), k) << what;
    for (size_t j = 0; j < lp.top.size(); ++j) {
      EXPECT_NEAR(lp.top[j].second, reference_logprob(row, lp.top[j].first), 1e-5) << what << " token " << i;
      if (j > 0) {
        EXPECT_GE(lp.top[j - 1].second, lp.top[j].second) << what;
      }
    }
    int better = 0;  // tokens ranked before the emitted one: larger logit, or equal with a lower id
    const float own = row[size_t(got.ids[i])];
    for (int t = 0; t < int(row.size()); ++t)
      better += row[size_t(t)] > own || (row[size_t(t)] == own && t < got.ids[i]);
    if (better < k) {
      EXPECT_TRUE(std::any_of(lp.top.begin(), lp.top.end(), [&](auto& e) { return e.first == got.ids[i]; }))
          << what << " token " << i;
    }
  }
}

using testing::kModes;
using testing::Subject;
using testing::subjects;
using testing::with_mode;

TEST(LogitEdits, MinusHundredBiasBansTheGreedyTokenInEveryMode) {
  for (Subject& s : subjects()) {
    Generator gen(*s.pair.target, s.pair.drafter.get(), s.calibration);
    const int V = s.pair.target->config().vocab_size;
    long accepted = 0;
    for (const std::vector<int32_t>& prompt : s.prompts) {
      GenerateOptions base;
      base.max_new_tokens = 30;
      base.mode = DecodeMode::None;
      const std::vector<int32_t> unbiased = gen.generate(prompt, base).ids;
      const int32_t banned = unbiased[0];
      base.logit_bias = {{banned, -100.0f}, {int32_t((banned + 7) % V), 1.5f}};
      const Reference ref = edited_reference(*s.pair.target, prompt, base);
      ASSERT_EQ(ref.ids.size(), 30u);
      EXPECT_NE(ref.ids, unbiased) << s.name << ": the bias must change the text";
      for (DecodeMode mode : kModes) {
        const GenerationResult r = gen.generate(prompt, with_mode(base, mode));
        EXPECT_EQ(std::count(r.ids.begin(), r.ids.end(), banned), 0) << s.name << " mode " << int(mode);
        EXPECT_EQ(r.ids, ref.ids) << s.name << " mode " << int(mode);
        EXPECT_TRUE(r.logprobs.empty());
        accepted += r.stats.accepted_draft_tokens;
      }
    }
    if (s.name == "shipped pair") {
      EXPECT_GT(accepted, 10) << "the biased drafts must still be accepted";
    }
  }
}

TEST(LogitEdits, MinTokensKeepsStopIdsOutAndGreedySpecEqualsPlain) {
  for (Subject& s : subjects()) {
    Generator gen(*s.pair.target, s.pair.drafter.get(), s.calibration);
    long accepted = 0;
    for (const std::vector<int32_t>& prompt : s.prompts) {
      GenerateOptions base;
      base.max_new_tokens = 30;
      base.mode = DecodeMode::None;
      const std::vector<int32_t> plain = gen.generate(prompt, base).ids;
      base.stop_ids = {plain[1], plain[3]};  // greedy decoding would stop after at most 2 tokens
      const GenerationResult early = gen.generate(prompt, base);
      EXPECT_LE(early.ids.size(), 2u);
      EXPECT_EQ(early.finish_reason, "stop");
      base.min_tokens = 12;
      const Reference ref = edited_reference(*s.pair.target, prompt, base);
      ASSERT_GE(ref.ids.size(), 12u) << s.name;
      for (int i = 0; i < 12; ++i)
        ASSERT_EQ(std::count(base.stop_ids.begin(), base.stop_ids.end(), ref.ids[size_t(i)]), 0);
      for (DecodeMode mode : kModes) {
        const GenerationResult r = gen.generate(prompt, with_mode(base, mode));
        EXPECT_EQ(r.ids, ref.ids) << s.name << " mode " << int(mode);
        EXPECT_GE(r.ids.size(), 12u);
        accepted += r.stats.accepted_draft_tokens;
      }
      // With a bias that makes a stop id the greedy choice, the mask alone holds it back until min_tokens.
      GenerateOptions pushed = base;
      pushed.logit_bias = {{base.stop_ids[0], 100.0f}};
      const Reference forced = edited_reference(*s.pair.target, prompt, pushed);
      ASSERT_EQ(forced.ids.size(), 13u) << s.name << ": the stop is emitted right after min_tokens";
      EXPECT_EQ(forced.ids.back(), base.stop_ids[0]);
      for (DecodeMode mode : kModes) {
        const GenerationResult r = gen.generate(prompt, with_mode(pushed, mode));
        EXPECT_EQ(r.ids, forced.ids) << s.name << " mode " << int(mode);
        EXPECT_EQ(r.finish_reason, "stop");
        accepted += r.stats.accepted_draft_tokens;
      }
    }
    if (s.name == "shipped pair") {
      EXPECT_GT(accepted, 10) << "the masked drafts must still be accepted";
    }
  }
}

TEST(LogitEdits, GreedyLogprobsAreTheSameInEveryMode) {
  for (Subject& s : subjects()) {
    Generator gen(*s.pair.target, s.pair.drafter.get(), s.calibration);
    for (const std::vector<int32_t>& prompt : s.prompts) {
      GenerateOptions base;
      base.max_new_tokens = 24;
      base.logprobs = 5;
      base.logit_bias = {{4, -3.0f}, {9, 2.0f}};
      base.stop_ids = {2};
      base.min_tokens = 6;
      const Reference ref = edited_reference(*s.pair.target, prompt, base);
      std::vector<GenerationResult> runs;
      for (DecodeMode mode : kModes) {
        runs.push_back(gen.generate(prompt, with_mode(base, mode)));
        const GenerationResult& r = runs.back();
        EXPECT_EQ(r.ids, ref.ids) << s.name << " mode " << int(mode);
        expect_logprobs_match(r, ref, 5, s.name + " mode " + std::to_string(int(mode)));
        for (const TokenLogprobs& lp : r.logprobs) EXPECT_LE(lp.logprob, 0.0f);
      }
      // Bit-identical across modes: verified tree rows are the plain rows.
      for (size_t m = 1; m < runs.size(); ++m) {
        ASSERT_EQ(runs[m].logprobs.size(), runs[0].logprobs.size());
        for (size_t i = 0; i < runs[0].logprobs.size(); ++i) {
          EXPECT_EQ(runs[m].logprobs[i].logprob, runs[0].logprobs[i].logprob) << s.name << " mode " << m;
          EXPECT_EQ(runs[m].logprobs[i].top, runs[0].logprobs[i].top) << s.name << " mode " << m;
        }
      }
    }
  }
}

TEST(LogitEdits, SampledLogprobsAreLogSoftmaxOfAPlainForwardOverThePrefix) {
  for (Subject& s : subjects()) {
    Generator gen(*s.pair.target, s.pair.drafter.get(), s.calibration);
    for (const std::vector<int32_t>& prompt : s.prompts) {
      for (DecodeMode mode : {DecodeMode::Chain, DecodeMode::Tree}) {
        GenerateOptions o = with_mode(GenerateOptions{}, mode);
        o.max_new_tokens = 20;
        o.sampling.temperature = 0.8f;
        o.sampling.top_k = 8;
        o.sampling.seed = 3;
        o.logprobs = 3;
        o.logit_bias = {{1, 1.0f}};
        o.stop_ids = {0};
        o.min_tokens = 5;
        const GenerationResult r = gen.generate(prompt, o);
        ASSERT_FALSE(r.ids.empty());
        const Reference ref = edited_reference(*s.pair.target, prompt, o, r.ids);
        expect_logprobs_match(r, ref, 3, s.name + " sampled mode " + std::to_string(int(mode)));
      }
    }
  }
}

// The exact distribution of the continuations after `prompt` under the edited target with o's processors: a
// continuation ends at a stop id or after `len` tokens.
void exact_edited(TargetModel& m, const std::vector<int32_t>& prompt, int len, const RequestOptions& o,
                  std::map<std::vector<int32_t>, double>* out) {
  const int V = m.config().vocab_size;
  std::vector<std::pair<std::vector<int32_t>, double>> frontier = {{{}, 1.0}};
  while (!frontier.empty()) {
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
      edit_row(o, int64_t(suffix.size()), r.logits.data());
      std::vector<double> p;
      processed_distribution(r.logits.data(), V, o.sampling, &p);
      for (int v = 0; v < V; ++v) {
        if (p[v] == 0) continue;
        auto s = suffix;
        s.push_back(v);
        const bool ends = int(s.size()) == len || std::count(o.stop_ids.begin(), o.stop_ids.end(), v) > 0;
        if (ends) {
          (*out)[s] += mass * p[v];
        } else {
          next.push_back({s, mass * p[v]});
        }
      }
    }
    frontier.swap(next);
  }
}

// Like the engine's shared-batch sampling test: request A's stop id is its most likely token, masked for its first
// two tokens (the tree's root row masked, its depth-1 rows not) and favoured by a bias after; request B bans its
// most likely token and favours another under top-k. The bound is the same per-cell standard error, x1.5 plus
// 0.01; each sample set must also be far from its unedited distribution.
TEST(LogitEdits, SampledTreesKeepTheEditedTargetDistribution) {
  Pair pair = make_pair(/*vocab=*/8, /*hidden=*/32, /*layers=*/1, /*block=*/4, DType::F32, 78);
  const std::vector<int32_t> prompt_a = {1, 5, 2}, prompt_b = {3, 3, 6, 0};
  RequestOptions a, b;
  a.max_new_tokens = b.max_new_tokens = 3;
  a.sampling.temperature = 2.5f;  // this pair repeats its last token with ~0.97 at T = 1: spread it
  a.mode = b.mode = DecodeMode::Tree;
  a.tree.theta = b.tree.theta = 0;
  a.tree.node_cap = 6;
  a.tree.branch_cap = 3;
  b.sampling.temperature = 1.3f;
  b.sampling.top_k = 5;
  b.tree.node_cap = 8;
  b.tree.branch_cap = 4;
  std::map<std::vector<int32_t>, double> exact_a, exact_b, plain_a, plain_b, count_a, count_b;
  // A's stop id is the token its edits make most likely to end a continuation as its third token (where the mask
  // lifts: a tree row at depth 1 in the first round); B bans its most likely first token.
  auto edits_a = [&](int32_t stop) {
    RequestOptions o = a;
    o.stop_ids = {stop};
    o.min_tokens = 2;
    o.logit_bias = {{stop, 2.0f}, {int32_t((stop + 1) % 8), -1.0f}};
    return o;
  };
  int32_t stop_a = 0;
  double best_mass = -1;
  for (int32_t stop = 0; stop < 8; ++stop) {
    std::map<std::vector<int32_t>, double> edited;
    exact_edited(*pair.target, prompt_a, 3, edits_a(stop), &edited);
    double mass = 0;
    for (auto& [seq, m] : edited) mass += seq.back() == stop ? m : 0.0;
    if (mass > best_mass) best_mass = mass, stop_a = stop;
  }
  ASSERT_GT(best_mass, 0.1);
  std::map<std::vector<int32_t>, double> first_b;
  exact_edited(*pair.target, prompt_b, 1, b, &first_b);
  const int32_t top_b =
      std::max_element(first_b.begin(), first_b.end(), [](auto& x, auto& y) { return x.second < y.second; })
          ->first[0];
  a.stop_ids = {stop_a};
  exact_edited(*pair.target, prompt_a, 3, a, &plain_a);
  exact_edited(*pair.target, prompt_b, 3, b, &plain_b);
  a = edits_a(stop_a);
  b.logit_bias = {{top_b, -100.0f}, {int32_t((top_b + 3) % 8), 1.5f}};
  exact_edited(*pair.target, prompt_a, 3, a, &exact_a);
  exact_edited(*pair.target, prompt_b, 3, b, &exact_b);
  ASSERT_GT(exact_a.size(), 20u);
  ASSERT_GT(exact_b.size(), 20u);
  const int N = 8000;
  EngineConfig config;
  config.max_batch = 2;
  Engine engine(*pair.target, pair.drafter.get(), config);
  long accepted = 0, deep_rounds = 0;
  for (int i = 0; i < N; ++i) {
    a.sampling.seed = 9000 + 2 * i;
    b.sampling.seed = 9001 + 2 * i;
    std::vector<int32_t> ids_a, ids_b;
    RequestStats stats_a;
    engine.add({prompt_a, a}, [&](const RequestEvent& e) {
      ids_a.insert(ids_a.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::None) stats_a = *e.stats;
    });
    engine.add({prompt_b, b},
               [&](const RequestEvent& e) { ids_b.insert(ids_b.end(), e.tokens.begin(), e.tokens.end()); });
    while (!engine.idle()) engine.step();
    ASSERT_EQ(ids_a.size(), 3u);  // the stop can only come third
    ASSERT_EQ(ids_b.size(), 3u);
    count_a[ids_a] += 1.0 / N;
    count_b[ids_b] += 1.0 / N;
    accepted += stats_a.accepted_draft_tokens;
    // A first round that accepted a draft emitted token number 2 from a depth-1 row (unmasked) below the masked
    // root row.
    deep_rounds += stats_a.rounds == 1 && stats_a.accepted_draft_tokens > 0;
  }
  auto tv_and_bound = [&](const testing::Continuations& exact, const testing::Continuations& got) {
    return testing::tv_and_bound(exact, got, N);
  };
  // The mass that lifting the mask at depth 1 gives A's stop id, within 4.5 standard errors.
  double third_stop_exact = 0, third_stop_sampled = 0;
  for (auto& [seq, mass] : exact_a) third_stop_exact += seq.back() == stop_a ? mass : 0.0;
  for (auto& [seq, mass] : count_a) third_stop_sampled += seq.back() == stop_a ? mass : 0.0;
  EXPECT_NEAR(third_stop_sampled, third_stop_exact, 4.5 * std::sqrt(third_stop_exact * (1 - third_stop_exact) / N));
  auto [tv_a, bound_a] = tv_and_bound(exact_a, count_a);
  auto [tv_b, bound_b] = tv_and_bound(exact_b, count_b);
  std::printf("edited A (bias, min_tokens 2): TV %.4f bound %.4f, stop third %.4f (exact %.4f), %.3f of its first "
              "rounds accepted a draft; edited B (bias, top-k 5): TV %.4f bound %.4f\n", tv_a, bound_a,
              third_stop_sampled, third_stop_exact, double(deep_rounds) / N, tv_b, bound_b);
  EXPECT_LT(tv_a, bound_a);
  EXPECT_LT(tv_b, bound_b);
  EXPECT_GT(tv_and_bound(plain_a, count_a).first, bound_a) << "the edits must matter";
  EXPECT_GT(tv_and_bound(plain_b, count_b).first, bound_b) << "the edits must matter";
  EXPECT_GT(accepted, N / 20);
  EXPECT_GT(deep_rounds, N / 50) << "rounds must accept past the masked root row";
}

TEST(LogitEdits, RejectsBadValuesNamingTheField) {
  Pair pair = make_pair(16, 32, 1, 4, DType::F32, 5);
  Engine engine(*pair.target, pair.drafter.get());
  auto reason = [&](const RequestOptions& o) -> std::string {
    try {
      engine.validate({{1, 2}, o});
    } catch (const RequestRejected& e) {
      EXPECT_EQ(e.reason(), RejectReason::BadParams);
      return e.what();
    }
    return "";
  };
  RequestOptions o;
  EXPECT_EQ(reason(o), "");
  o.logit_bias = {{16, 1.0f}};
  EXPECT_NE(reason(o).find("logit_bias"), std::string::npos);
  o.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(reason(o).find("logit_bias"), std::string::npos);
  o.logit_bias = {{3, 150.0f}};
  EXPECT_NE(reason(o).find("logit_bias"), std::string::npos);
  o.logit_bias = {{3, std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_NE(reason(o).find("logit_bias"), std::string::npos);
  o.logit_bias = {{15, -100.0f}, {0, 100.0f}};
  EXPECT_EQ(reason(o), "");
  o.min_tokens = o.max_new_tokens + 1;
  EXPECT_NE(reason(o).find("min_tokens"), std::string::npos);
  o.min_tokens = -1;
  EXPECT_NE(reason(o).find("min_tokens"), std::string::npos);
  o.min_tokens = o.max_new_tokens;
  EXPECT_EQ(reason(o), "");
  o.logprobs = 21;
  EXPECT_NE(reason(o).find("logprobs"), std::string::npos);
  o.logprobs = -2;
  EXPECT_NE(reason(o).find("logprobs"), std::string::npos);
  o.logprobs = 20;
  EXPECT_EQ(reason(o), "");
}

}  // namespace
}  // namespace ts
