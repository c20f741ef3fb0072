// Sampling penalties through the engine (request.h: presence_penalty, frequency_penalty, repetition_penalty): in
// plain, chain and tree modes the greedy tokens equal an independent target-only reference over the penalized
// logits (so a tree row, which counts the draft tokens on its own path, is the plain row), logprobs are the same
// bits in every mode, a strong repetition penalty changes what greedy decoding writes, sampled trees keep the
// penalized target distribution where the path matters, and bad values are rejected naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

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

// The request's edits in the documented order, written out independently of src/sampling: logit_bias, then
// repetition over prompt and generated tokens, frequency and presence over generated ones. row: [vocab]
void penalize_row(const RequestOptions& o, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
                  float* row, int vocab) {
  for (const auto& [id, bias] : o.logit_bias) row[id] += bias;
  std::map<int32_t, int> count;
  for (int32_t t : generated) ++count[t];
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  seen.insert(generated.begin(), generated.end());
  for (int t = 0; t < vocab; ++t) {
    if (seen.count(t)) row[t] = row[t] > 0 ? row[t] / o.repetition_penalty : row[t] * o.repetition_penalty;
    const int c = count.count(t) ? count[t] : 0;
    row[t] -= o.frequency_penalty * float(c);
    row[t] -= c > 0 ? o.presence_penalty : 0.0f;
  }
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
  std::vector<std::vector<float>> rows;  // [ids.size()][vocab] the penalized row each token was chosen from
};

// Target-only greedy decoding, one token per forward, over penalized logits, for o.max_new_tokens tokens.
Reference penalized_reference(TargetModel& m, const std::vector<int32_t>& prompt, const RequestOptions& o) {
  const int V = m.config().vocab_size;
  KVCache cache = m.new_cache(int(prompt.size()) + o.max_new_tokens + 1);
  ForwardBatch b;
  b.tokens = prompt;
  for (int i = 0; i < int(prompt.size()); ++i) b.positions.push_back(i);
  b.logit_rows = {int(prompt.size()) - 1};
  ForwardResult r;
  Reference ref;
  for (int step = 0; step < o.max_new_tokens; ++step) {
    m.forward(b, {&cache}, &r);
    cache.commit_all();
    std::vector<float> row(r.logits.begin(), r.logits.begin() + V);
    penalize_row(o, prompt, ref.ids, row.data(), V);
    const int32_t next = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    ref.ids.push_back(next);
    ref.rows.push_back(row);
    b.tokens = {next};
    b.positions = {cache.length()};
    b.logit_rows = {0};
  }
  return ref;
}

using testing::kModes;
using testing::Subject;
using testing::subjects;
using testing::with_mode;

GenerateOptions penalties(float presence, float frequency, float repetition) {
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.presence_penalty = presence;
  o.frequency_penalty = frequency;
  o.repetition_penalty = repetition;
  return o;
}

// Each penalty alone, all three (pushing both ways), and all three with a logit bias on a prompt token (the bias
// comes first, so the repetition penalty scales it) and logprobs.
TEST(Penalties, GreedySpecEqualsPlainAndTheReferenceWithEachPenalty) {
  for (Subject& s : subjects()) {
    Generator gen(*s.pair.target, s.pair.drafter.get(), s.calibration);
    long accepted = 0;
    for (const std::vector<int32_t>& prompt : s.prompts) {
      std::vector<GenerateOptions> cases = {penalties(1.5f, 0, 1), penalties(0, 1.0f, 1), penalties(0, 0, 1.8f),
                                            penalties(0.4f, 0.6f, 1.3f), penalties(-0.5f, -0.3f, 0.8f),
                                            penalties(0.3f, 0.8f, 1.5f)};
      cases.back().logit_bias = {{prompt[0], 3.0f}};
      cases.back().logprobs = 4;
      for (const GenerateOptions& base : cases) {
        const std::string what = cat(s.name, " presence ", base.presence_penalty, " frequency ",
                                     base.frequency_penalty, " repetition ", base.repetition_penalty);
        const Reference ref = penalized_reference(*s.pair.target, prompt, base);
        std::vector<GenerationResult> runs;
        for (DecodeMode mode : kModes) {
          runs.push_back(gen.generate(prompt, with_mode(base, mode)));
          const GenerationResult& r = runs.back();
          EXPECT_EQ(r.ids, ref.ids) << what << " mode " << int(mode);
          accepted += r.stats.accepted_draft_tokens;
          if (base.logprobs < 0) continue;
          ASSERT_EQ(r.logprobs.size(), r.ids.size()) << what;
          for (size_t i = 0; i < r.ids.size() && i < ref.rows.size(); ++i) {
            EXPECT_NEAR(r.logprobs[i].logprob, reference_logprob(ref.rows[i], r.ids[i]), 1e-5) << what << " " << i;
            ASSERT_EQ(r.logprobs[i].top.size(), 4u);
            EXPECT_EQ(r.logprobs[i].top[0].first, r.ids[i]) << what << ": a greedy token tops its own list";
          }
        }
        for (size_t m = 1; m < runs.size() && base.logprobs >= 0; ++m) {  // bit-identical rows in every mode
          ASSERT_EQ(runs[m].logprobs.size(), runs[0].logprobs.size());
          for (size_t i = 0; i < runs[0].logprobs.size(); ++i) {
            EXPECT_EQ(runs[m].logprobs[i].logprob, runs[0].logprobs[i].logprob) << what << " mode " << m;
            EXPECT_EQ(runs[m].logprobs[i].top, runs[0].logprobs[i].top) << what << " mode " << m;
          }
        }
      }
    }
    if (s.name == "shipped pair") {
      EXPECT_GT(accepted, 20) << "the penalized drafts must still be accepted";
    }
  }
}

// A strong repetition penalty changes the greedy text, and the plain and speculative runs agree on the new text.
TEST(Penalties, StrongRepetitionPenaltyChangesTheGreedyText) {
  for (Subject& s : subjects()) {
    Generator gen(*s.pair.target, s.pair.drafter.get(), s.calibration);
    for (const std::vector<int32_t>& prompt : s.prompts) {
      const GenerateOptions off = penalties(0, 0, 1), strong = penalties(0, 0, 3.0f);
      const std::vector<int32_t> unpenalized = gen.generate(prompt, with_mode(off, DecodeMode::None)).ids;
      const std::vector<int32_t> plain = gen.generate(prompt, with_mode(strong, DecodeMode::None)).ids;
      EXPECT_NE(plain, unpenalized) << s.name << ": the penalty must change the text";
      // Distinct tokens: the penalty makes the text repeat itself less.
      const size_t distinct_off = std::set<int32_t>(unpenalized.begin(), unpenalized.end()).size();
      const size_t distinct_on = std::set<int32_t>(plain.begin(), plain.end()).size();
      EXPECT_GE(distinct_on, distinct_off) << s.name;
      for (DecodeMode mode : {DecodeMode::Chain, DecodeMode::Tree})
        EXPECT_EQ(gen.generate(prompt, with_mode(strong, mode)).ids, plain) << s.name << " mode " << int(mode);
    }
  }
}

// The exact distribution of the `len`-token continuations after `prompt` under the penalized target with o's
// processors (no stop ids).
void exact_penalized(TargetModel& m, const std::vector<int32_t>& prompt, int len, const RequestOptions& o,
                     std::map<std::vector<int32_t>, double>* out) {
  const int V = m.config().vocab_size;
  testing::exact_continuations(m, prompt, len, o.sampling, out,
                               [&](const std::vector<int32_t>& generated, float* logits) {
                                 penalize_row(o, prompt, generated, logits, V);
                               });
}

// Two requests in one engine: A (frequency and presence penalties, T = 2.5) on a pair that repeats its last token
// with ~0.97 at T = 1, so the penalties largely decide whether token 3 repeats token 2; in a first round that
// accepted a draft token 3 comes from a depth-1 row, whose counts hold token 2 only through that node's path (rows
// that ignore the path fail both A's checks). B: a repetition penalty over its
// prompt with top-k. Bound: the per-cell standard error, x1.5 plus 0.01, as in the logit-edits test; each sample
// set must also be far from its unpenalized distribution.
TEST(Penalties, SampledTreesKeepThePenalizedTargetDistribution) {
  Pair pair = make_pair(/*vocab=*/8, /*hidden=*/32, /*layers=*/1, /*block=*/4, DType::F32, 78);
  const std::vector<int32_t> prompt_a = {1, 5, 2}, prompt_b = {3, 3, 6, 0};
  RequestOptions a, b;
  a.max_new_tokens = b.max_new_tokens = 3;
  a.sampling.temperature = 2.5f;
  a.mode = b.mode = DecodeMode::Tree;
  a.tree.theta = b.tree.theta = 0;
  a.tree.node_cap = 8;
  a.tree.branch_cap = 4;
  b.sampling.temperature = 1.3f;
  b.sampling.top_k = 5;
  b.tree.node_cap = 8;
  b.tree.branch_cap = 4;
  std::map<std::vector<int32_t>, double> exact_a, exact_b, plain_a, plain_b, count_a, count_b;
  exact_penalized(*pair.target, prompt_a, 3, a, &plain_a);
  exact_penalized(*pair.target, prompt_b, 3, b, &plain_b);
  a.frequency_penalty = 1.5f;
  a.presence_penalty = 1.0f;
  b.repetition_penalty = 2.0f;
  b.frequency_penalty = -0.5f;
  exact_penalized(*pair.target, prompt_a, 3, a, &exact_a);
  exact_penalized(*pair.target, prompt_b, 3, b, &exact_b);
  const int N = 8000;
  EngineConfig config;
  config.max_batch = 2;
  Engine engine(*pair.target, pair.drafter.get(), config);
  long accepted = 0, deep_rounds = 0;
  for (int i = 0; i < N; ++i) {
    a.sampling.seed = 7000 + 2 * i;
    b.sampling.seed = 7001 + 2 * i;
    std::vector<int32_t> ids_a, ids_b;
    RequestStats stats_a;
    engine.add({prompt_a, a}, [&](const RequestEvent& e) {
      ids_a.insert(ids_a.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::None) stats_a = *e.stats;
    });
    engine.add({prompt_b, b},
               [&](const RequestEvent& e) { ids_b.insert(ids_b.end(), e.tokens.begin(), e.tokens.end()); });
    while (!engine.idle()) engine.step();
    ASSERT_EQ(ids_a.size(), 3u);
    ASSERT_EQ(ids_b.size(), 3u);
    count_a[ids_a] += 1.0 / N;
    count_b[ids_b] += 1.0 / N;
    accepted += stats_a.accepted_draft_tokens;
    deep_rounds += stats_a.rounds == 1 && stats_a.accepted_draft_tokens > 0;  // token 3 from a depth-1 row
  }
  auto tv_and_bound = [&](const testing::Continuations& exact, const testing::Continuations& got) {
    return testing::tv_and_bound(exact, got, N);
  };
  // The mass of "token 3 repeats token 2", which the path's counts decide, within 4.5 standard errors.
  auto repeats = [](std::map<std::vector<int32_t>, double>& d) {
    double m = 0;
    for (auto& [seq, mass] : d) m += seq[2] == seq[1] ? mass : 0.0;
    return m;
  };
  const double repeat_exact = repeats(exact_a), repeat_sampled = repeats(count_a);
  EXPECT_NEAR(repeat_sampled, repeat_exact, 4.5 * std::sqrt(repeat_exact * (1 - repeat_exact) / N));
  auto [tv_a, bound_a] = tv_and_bound(exact_a, count_a);
  auto [tv_b, bound_b] = tv_and_bound(exact_b, count_b);
  std::printf("penalized A (frequency 1.5, presence 1): TV %.4f bound %.4f, token 3 repeats token 2 %.4f (exact "
              "%.4f, unpenalized %.4f), %.3f of its first rounds accepted a draft; penalized B (repetition 2, "
              "frequency -0.5, top-k 5): TV %.4f bound %.4f\n", tv_a, bound_a, repeat_sampled, repeat_exact,
              repeats(plain_a), double(deep_rounds) / N, tv_b, bound_b);
  EXPECT_LT(tv_a, bound_a);
  EXPECT_LT(tv_b, bound_b);
  EXPECT_GT(tv_and_bound(plain_a, count_a).first, bound_a) << "the penalties must matter";
  EXPECT_GT(tv_and_bound(plain_b, count_b).first, bound_b) << "the penalties must matter";
  EXPECT_GT(accepted, N / 20);
  EXPECT_GT(deep_rounds, N / 50) << "rounds must accept past the root row";
}

TEST(Penalties, RejectsBadValuesNamingTheField) {
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
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {2.5f, -2.01f, nan, std::numeric_limits<float>::infinity()}) {
    RequestOptions o;
    o.presence_penalty = bad;
    EXPECT_NE(reason(o).find("presence_penalty"), std::string::npos) << bad;
    o = RequestOptions{};
    o.frequency_penalty = bad;
    EXPECT_NE(reason(o).find("frequency_penalty"), std::string::npos) << bad;
  }
  for (float bad : {0.0f, -1.0f, 10.5f, nan}) {
    RequestOptions o;
    o.repetition_penalty = bad;
    EXPECT_NE(reason(o).find("repetition_penalty"), std::string::npos) << bad;
  }
  RequestOptions o;
  EXPECT_EQ(reason(o), "");
  o.presence_penalty = -2;
  o.frequency_penalty = 2;
  o.repetition_penalty = 10;
  EXPECT_EQ(reason(o), "");
  o.repetition_penalty = 0.01f;
  EXPECT_EQ(reason(o), "");
}

}  // namespace
}  // namespace ts
