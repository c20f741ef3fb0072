// The step engine on random tiny pairs: several requests decoded together give each request exactly the greedy
// tokens it gets alone (and the target alone gives); sampled requests sharing a batch keep the target's
// distribution; cancellation, failing callbacks, KV admission and rejections behave; KV accounting returns to zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "engine/engine.h"
#include "core/mapped_file.h"
#include "engine/generator.h"
#include "engine/model_bundle.h"
#include "engine/tiny_pair.h"

namespace ts {
namespace {

using testing::exact_continuations;
using testing::greedy_reference;
using testing::make_pair;
using testing::Pair;

struct Collected {
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::None;
  std::string error;
  RequestStats stats;
  int final_events = 0;
};

EventCallback collect(Collected* c) {
  return [c](const RequestEvent& e) {
    c->ids.insert(c->ids.end(), e.tokens.begin(), e.tokens.end());
    if (e.finish == FinishReason::None) return;
    ++c->final_events;
    c->finish = e.finish;
    c->error = e.error;
    c->stats = *e.stats;
  };
}

std::vector<int32_t> prompt_of(int i, int vocab) {
  std::vector<int32_t> p;
  for (int j = 0; j < 3 + 4 * i; ++j) p.push_back(int32_t((i * 11 + j * 7 + 3) % (vocab - 1)));
  return p;
}

RequestOptions options_of(int i, int max_new) {
  RequestOptions o;
  o.max_new_tokens = max_new;
  const DecodeMode modes[] = {DecodeMode::Tree, DecodeMode::Chain, DecodeMode::None, DecodeMode::Tree};
  o.mode = modes[i % 4];
  o.tree.theta = i % 2 ? 0.0 : 0.05;
  o.tree.node_cap = 4 + 3 * i;
  o.tree.branch_cap = 1 + i % 3;
  o.tree.draft_len = 2 + i % 4;
  if (i % 4 == 3) o.mode = DecodeMode::LogQ;
  return o;
}

CostModel toy_curve() {
  CostModel c;
  c.batches = {1, 4};
  c.tokens = {1, 4, 16};
  c.ms = {1.0, 1.1, 1.6, 2.0, 4.0, 12.0};
  c.fixed_ms_by_batch = {0.2, 0.5};
  return c;
}

TEST(Engine, BatchedGreedyEqualsOneByOneAndTargetOnly) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 11);
  const int n_requests = 7, max_new = 30;
  for (bool adaptive : {false, true}) {
    EngineConfig config;
    config.max_batch = 4;      // 7 requests: some queue, then join a running batch
    config.prefill_chunk = 7;  // prompts of 3..27 tokens are cut into chunks while others decode
    if (adaptive) config.cost_model = toy_curve();
    Engine engine(*pair.target, pair.drafter.get(), config);
    std::vector<Collected> got(n_requests);
    for (int i = 0; i < n_requests; ++i) {
      Request r;
      r.prompt = prompt_of(i, 20);
      r.options = options_of(i, max_new);
      engine.add(r, collect(&got[i]));
    }
    int steps = 0, max_forward_rows = 0, max_batch_seen = 0;
    while (!engine.idle()) {
      StepReport rep = engine.step();
      max_forward_rows = std::max(max_forward_rows, rep.forward_rows);
      max_batch_seen = std::max(max_batch_seen, rep.batch);
      ASSERT_LT(++steps, 1000);
    }
    EXPECT_GE(max_batch_seen, 3) << "requests must actually share steps";
    EXPECT_LE(max_batch_seen, 4);
    Generator alone(*pair.target, pair.drafter.get());
    long accepted = 0, rounds_total = 0;
    double predicted = 0;
    for (int i = 0; i < n_requests; ++i) {
      GenerateOptions o;
      static_cast<RequestOptions&>(o) = options_of(i, max_new);
      const GenerationResult solo = alone.generate(prompt_of(i, 20), o);
      EXPECT_EQ(got[i].ids, solo.ids) << "request " << i << (adaptive ? " (adaptive)" : "");
      EXPECT_EQ(got[i].ids, greedy_reference(*pair.target, prompt_of(i, 20), max_new)) << "request " << i;
      EXPECT_EQ(got[i].finish, FinishReason::Length);
      EXPECT_EQ(got[i].final_events, 1);
      EXPECT_EQ(got[i].stats.generated_tokens, max_new);
      accepted += got[i].stats.accepted_draft_tokens;
      predicted += got[i].stats.predicted_draft_tokens;
      rounds_total += got[i].stats.rounds;
    }
    // Random pairs rarely agree (acceptance is exercised on the shipped pair below); rounds must have run.
    EXPECT_GT(rounds_total, adaptive ? 4 : 100);
    const EngineMetrics m = engine.metrics();
    EXPECT_EQ(m.num_requests_running, 0);
    EXPECT_EQ(m.num_requests_waiting, 0);
    EXPECT_EQ(m.kv_cache_usage_perc, 0);
    EXPECT_EQ(m.kv_reserved_perc, 0);
    EXPECT_EQ(m.generation_tokens, int64_t(n_requests) * max_new);
    EXPECT_GT(predicted, 0);
    EXPECT_NEAR(m.spec_decode_predicted_tokens, predicted, 1e-9 * predicted);  // the requests' sum, no more
    int64_t prompt_tokens = 0;
    for (int i = 0; i < n_requests; ++i) prompt_tokens += int64_t(prompt_of(i, 20).size());
    EXPECT_EQ(m.prompt_tokens, prompt_tokens);
    EXPECT_EQ(m.requests_finished[int(FinishReason::Length)], n_requests);
    int64_t rounds = 0, nodes = 0, acc = 0;
    for (const Collected& c : got) {
      rounds += c.stats.rounds;
      nodes += c.stats.tree_nodes;
      acc += c.stats.accepted_draft_tokens;
    }
    EXPECT_EQ(m.spec_decode_num_drafts, rounds);
    EXPECT_EQ(m.spec_decode_num_draft_tokens, nodes);
    EXPECT_EQ(m.spec_decode_num_accepted_tokens, acc);
    ASSERT_EQ(m.spec_decode_num_accepted_tokens_per_pos.size(), 7u);
    EXPECT_EQ(m.spec_decode_num_accepted_tokens_per_pos[0] > 0, acc > 0);
    for (size_t p = 1; p < 7; ++p)
      EXPECT_LE(m.spec_decode_num_accepted_tokens_per_pos[p], m.spec_decode_num_accepted_tokens_per_pos[p - 1]);
  }
}

// The same on the shipped pair (models/), where drafts are accepted: per-request greedy identity at batch 4 with
// real acceptance, prompts prefilled in chunks next to decoding requests.
TEST(Engine, ShippedPairBatchedGreedyEqualsOneByOne) {
  const std::string dir = std::string(TS_SOURCE_DIR) + "/models/";
  if (!file_exists(dir + "treespark-target/config.json")) GTEST_SKIP() << "no shipped pair in " << dir;
  ModelBundle bundle = ModelBundle::load(dir + "treespark-target", dir + "treespark-drafter");
  const std::vector<std::string> texts = {"def fibonacci(n):\n", "import os\nimport sys\n\n", "class Stack:\n    def",
                                          "for i in range(10):\n", "The history of"};
  EngineConfig config;
  config.max_batch = 4;
  config.prefill_chunk = 8;
  config.calibration = bundle.calibration;
  Engine engine(*bundle.target, bundle.drafter.get(), config);
  std::vector<Collected> got(texts.size());
  RequestOptions o;
  o.max_new_tokens = 40;
  o.tree.node_cap = 24;
  for (size_t i = 0; i < texts.size(); ++i) engine.add({bundle.prompt_ids({}, texts[i], false, false), o}, collect(&got[i]));
  while (!engine.idle()) engine.step();
  Generator alone(*bundle.target, bundle.drafter.get(), bundle.calibration.lookup(0));
  long accepted = 0, rounds = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    GenerateOptions g;
    static_cast<RequestOptions&>(g) = o;
    const std::vector<int32_t> prompt = bundle.prompt_ids({}, texts[i], false, false);
    EXPECT_EQ(got[i].ids, alone.generate(prompt, g).ids) << texts[i];
    EXPECT_EQ(got[i].ids, greedy_reference(*bundle.target, prompt, 40)) << texts[i];
    accepted += got[i].stats.accepted_draft_tokens;
    rounds += got[i].stats.rounds;
  }
  std::printf("shipped pair, 5 requests at batch <= 4: %.2f accepted draft tokens per round\n",
              rounds ? double(accepted) / rounds : 0.0);
  EXPECT_GT(accepted, rounds) << "the shipped drafter accepts more than one token per round on code";
}

// Two sampled requests share every step (one batched drafter forward, one target forward); each one's 3-token
// continuations must follow its own target distribution. The bound is the generator test's (per-cell standard
// error, x1.5 plus 0.01).
// A round first brings the drafter's context up to date with the rows its request committed in plain steps since
// its previous round. The step reports that catch-up apart (backlog_rows / backlog_ms, left out of what the
// load-adaptive policy learns a round costs). Here rows cost so much that speculation never pays: the request
// decodes plainly and speculates only in the policy's probes, each catching up with the plain steps before it.
TEST(Engine, TheDrafterBacklogIsReportedApartFromTheRound) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 11);
  EngineConfig config;
  config.cost_model = toy_curve();
  for (size_t i = 0; i < config.cost_model->ms.size(); ++i)
    if (i % 3 != 0) config.cost_model->ms[i] *= 100;  // k = 4 and 16: rows far dearer than any draft repays
  Engine engine(*pair.target, pair.drafter.get(), config);
  Collected got;
  Request r;
  r.prompt = prompt_of(2, 20);
  r.options.max_new_tokens = 60;
  r.options.mode = DecodeMode::Tree;
  engine.add(r, collect(&got));
  int rounds = 0, plain_since_round = 0, caught_up = 0;
  while (!engine.idle()) {
    const StepReport rep = engine.step();
    ASSERT_LT(rep.step, 200);
    EXPECT_GE(rep.backlog_ms, 0.0);
    EXPECT_LE(rep.backlog_ms, rep.draft_ms) << "the catch-up is part of the drafter's time";
    if (rep.decisions.empty()) continue;  // prefill
    if (!rep.decisions[0].speculate) {
      EXPECT_EQ(rep.backlog_rows, 0) << "step " << rep.step << ": no round, no catch-up";
      ++plain_since_round;
      continue;
    }
    ++rounds;
    EXPECT_EQ(rep.backlog_rows, plain_since_round) << "step " << rep.step << ": one row per plain step";
    caught_up += rep.backlog_rows;
    plain_since_round = 0;
  }
  EXPECT_GE(rounds, 2) << "probes";
  EXPECT_GT(caught_up, 0);
  EXPECT_EQ(got.ids, greedy_reference(*pair.target, r.prompt, 60));
}

// A round drafts no deeper than the request may still emit, and a request with one token left decodes plainly:
// nodes past the end could only be discarded. Every request still gets the target's greedy tokens.
TEST(Engine, RoundsDraftNoDeeperThanTheTokensLeft) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 12);
  for (int max_new : {2, 3, 4, 9}) {
    Engine engine(*pair.target, pair.drafter.get(), EngineConfig{});
    Collected got;
    Request r;
    r.prompt = prompt_of(1, 20);
    r.options.max_new_tokens = max_new;
    r.options.mode = DecodeMode::Tree;
    r.options.tree.theta = 0;  // grow to the node cap: as deep as allowed
    r.options.tree.node_cap = 16;
    r.options.tree.branch_cap = 2;
    engine.add(r, collect(&got));
    int generated = 1;  // the prefill's token
    while (!engine.idle()) {
      const StepReport rep = engine.step();
      ASSERT_LT(rep.step, 100);
      if (rep.decisions.empty() || rep.prefill_tokens > 0) continue;
      const int left = max_new - generated;
      const RoundDecision& d = rep.decisions[0];
      EXPECT_EQ(d.speculate, left >= 2) << "max_new " << max_new << ", " << left << " left";
      if (d.speculate && left <= 4) {
        // A node at depth d is token generated + d, so depth <= left - 1: with two children per node at most
        // 2 + 4 + ... + 2^(left - 1) nodes, where theta 0 would otherwise grow all 16.
        EXPECT_GT(d.tree_size, 0);
        EXPECT_LE(d.tree_size, (1 << left) - 2) << "max_new " << max_new << ", " << left << " left";
      }
      generated += d.speculate ? d.accepted + 1 : 1;
    }
    EXPECT_EQ(got.ids, greedy_reference(*pair.target, r.prompt, max_new)) << max_new;
    if (max_new == 2) {
      EXPECT_EQ(got.stats.rounds, 0) << "one token left after the prefill's: no round";
    }
  }
}

TEST(Engine, SampledRequestsSharingABatchKeepTheTargetDistribution) {
  Pair pair = make_pair(/*vocab=*/8, /*hidden=*/32, /*layers=*/1, /*block=*/4, DType::F32, 78);
  const std::vector<int32_t> prompt_a = {1, 5, 2}, prompt_b = {3, 3, 6, 0};
  RequestOptions a, b;
  a.max_new_tokens = b.max_new_tokens = 3;
  a.sampling.temperature = 1.0f;
  a.mode = DecodeMode::Tree;
  a.tree.theta = 0;
  a.tree.node_cap = 6;
  a.tree.branch_cap = 3;
  b.sampling.temperature = 1.6f;
  b.sampling.top_k = 6;
  b.sampling.top_p = 0.95f;
  b.mode = DecodeMode::Tree;
  b.tree.theta = 0;
  b.tree.node_cap = 8;
  b.tree.branch_cap = 4;
  std::map<std::vector<int32_t>, double> exact_a, exact_b, count_a, count_b;
  exact_continuations(*pair.target, prompt_a, 3, a.sampling, &exact_a);
  exact_continuations(*pair.target, prompt_b, 3, b.sampling, &exact_b);
  // Both distributions must be spread over many continuations, or the test would show nothing.
  ASSERT_GT(exact_a.size(), 20u);
  ASSERT_GT(exact_b.size(), 20u);
  const int N = 8000;
  EngineConfig config;
  config.max_batch = 2;
  Engine engine(*pair.target, pair.drafter.get(), config);
  long accepted = 0, shared_steps = 0;
  for (int i = 0; i < N; ++i) {
    a.sampling.seed = 5000 + 2 * i;
    b.sampling.seed = 5001 + 2 * i;
    Collected ca, cb;
    engine.add({prompt_a, a}, collect(&ca));
    engine.add({prompt_b, b}, collect(&cb));
    while (!engine.idle()) shared_steps += engine.step().batch == 2;
    ASSERT_EQ(ca.ids.size(), 3u);
    ASSERT_EQ(cb.ids.size(), 3u);
    count_a[ca.ids] += 1.0 / N;
    count_b[cb.ids] += 1.0 / N;
    accepted += ca.stats.accepted_draft_tokens + cb.stats.accepted_draft_tokens;
  }
  EXPECT_GE(shared_steps, N) << "the two requests must decode in the same steps";
  auto tv_and_bound = [&](const testing::Continuations& exact, const testing::Continuations& got) {
    return testing::tv_and_bound(exact, got, N);
  };
  auto [tv_a, bound_a] = tv_and_bound(exact_a, count_a);
  auto [tv_b, bound_b] = tv_and_bound(exact_b, count_b);
  std::printf("request A (T=1): TV %.4f bound %.4f; request B (T=1.6, top-k 6, top-p 0.95): TV %.4f bound %.4f\n",
              tv_a, bound_a, tv_b, bound_b);
  EXPECT_LT(tv_a, bound_a);
  EXPECT_LT(tv_b, bound_b);
  // Power: each request's samples are far from the other request's distribution.
  auto [tv_cross, unused] = tv_and_bound(exact_b, count_a);
  EXPECT_GT(tv_cross, bound_a);
  EXPECT_GT(accepted, N / 20);
}

// The engine's one batched drafter forward must give every block exactly what draft_block gives it alone (the
// greedy trees, and the q that sampled verification recomputes, depend on these logits bit for bit).
TEST(Engine, BatchedDrafterForwardEqualsOneBlockAtATime) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    Pair pair = make_pair(32, 32, 2, 5, dtype, 83);
    Drafter& d = *pair.drafter;
    const int B = d.block_size(), V = d.vocab_size(), W = d.tap_width();
    std::vector<DrafterState> states;
    std::vector<int32_t> anchors, positions;
    for (int s = 0; s < 3; ++s) {
      const int ctx = 3 + 7 * s;  // different context lengths per sequence
      states.push_back(d.new_state(64));
      std::vector<float> taps(size_t(ctx) * W);  // [ctx, tap_width]
      for (size_t i = 0; i < taps.size(); ++i) taps[i] = float(std::sin(0.37 * double(i) + s));
      std::vector<int32_t> pos(ctx);
      for (int i = 0; i < ctx; ++i) pos[i] = i;
      d.extend_context(states.back(), taps.data(), pos.data(), ctx);
      anchors.push_back(int32_t(5 + s));
      positions.push_back(ctx);
    }
    std::vector<DrafterState*> ptrs;
    for (auto& st : states) ptrs.push_back(&st);
    std::vector<float> batched(size_t(3) * B * V), single(size_t(B) * V);  // [3, B, V], [B, V]
    d.draft_blocks(ptrs, anchors.data(), positions.data(), batched.data());
    for (int s = 0; s < 3; ++s) {
      d.draft_block(states[s], anchors[s], positions[s], single.data());
      EXPECT_EQ(0, std::memcmp(single.data(), &batched[size_t(s) * B * V], sizeof(float) * B * V))
          << "block " << s << " " << dtype_name(dtype);
      EXPECT_EQ(states[s].context.length(), 3 + 7 * s) << "the context is unchanged";
    }
  }
}

TEST(Engine, CancelFreesTheSlotAndKvWithinOneStep) {
  Pair pair = make_pair(16, 32, 1, 4, DType::F32, 41);
  EngineConfig config;
  config.max_batch = 2;
  Engine engine(*pair.target, pair.drafter.get(), config);
  Collected c1, c2, c3;
  RequestOptions o;
  o.max_new_tokens = 40;
  const RequestId id1 = engine.add({{1, 2, 3}, o}, collect(&c1));
  engine.add({{4, 5}, o}, collect(&c2));
  engine.add({{6, 7, 8, 9}, o}, collect(&c3));  // waits: the batch is full
  engine.step();
  engine.step();
  EXPECT_EQ(engine.num_running(), 2);
  EXPECT_EQ(engine.num_waiting(), 1);
  const double reserved_before = engine.metrics().kv_reserved_perc;
  engine.cancel(id1);
  engine.step();  // the cancel takes effect here, and request 3 takes the slot
  EXPECT_EQ(c1.finish, FinishReason::Cancelled);
  EXPECT_EQ(c1.final_events, 1);
  EXPECT_EQ(engine.num_running(), 2);
  EXPECT_EQ(engine.num_waiting(), 0);
  EXPECT_GT(reserved_before, 0);
  const size_t tokens_at_cancel = c1.ids.size();
  while (!engine.idle()) engine.step();
  EXPECT_EQ(c1.ids.size(), tokens_at_cancel) << "no tokens after the cancel";
  EXPECT_EQ(c2.finish, FinishReason::Length);
  EXPECT_EQ(c3.finish, FinishReason::Length);
  EXPECT_EQ(c3.ids, greedy_reference(*pair.target, {6, 7, 8, 9}, 40));
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.kv_reserved_perc, 0);
  EXPECT_EQ(m.kv_cache_usage_perc, 0);
  EXPECT_EQ(m.requests_finished[int(FinishReason::Cancelled)], 1);
  engine.cancel(id1);  // unknown now: ignored
  engine.cancel(12345);
  EXPECT_TRUE(engine.idle());
}

TEST(Engine, AThrowingCallbackFailsOnlyItsRequest) {
  Pair pair = make_pair(16, 32, 2, 4, DType::F32, 43);
  Engine engine(*pair.target, pair.drafter.get(), EngineConfig{});
  RequestOptions o;
  o.max_new_tokens = 20;
  Collected good, bad_final;
  int bad_calls = 0;
  engine.add({{1, 2, 3}, o}, collect(&good));
  engine.add({{1, 2, 3}, o}, [&](const RequestEvent& e) {
    ++bad_calls;
    if (e.finish != FinishReason::None) {
      bad_final.finish = e.finish;
      bad_final.error = e.error;
      return;
    }
    if (bad_calls == 2) throw std::runtime_error("client went away");
  });
  while (!engine.idle()) engine.step();
  EXPECT_EQ(bad_final.finish, FinishReason::Error);
  EXPECT_NE(bad_final.error.find("client went away"), std::string::npos) << bad_final.error;
  EXPECT_EQ(bad_calls, 3);  // first tokens, the throwing event, the final Error event
  EXPECT_EQ(good.finish, FinishReason::Length);
  EXPECT_EQ(good.ids, greedy_reference(*pair.target, {1, 2, 3}, 20));
  EXPECT_EQ(engine.metrics().requests_finished[int(FinishReason::Error)], 1);
  EXPECT_EQ(engine.metrics().kv_reserved_perc, 0);
}

TEST(Engine, KvBudgetQueuesLongPromptsAndEveryoneFinishes) {
  Pair pair = make_pair(16, 32, 1, 4, DType::F32, 47);
  EngineConfig probe_config;
  Engine probe(*pair.target, pair.drafter.get(), probe_config);
  EngineConfig config;
  config.max_batch = 8;
  config.max_context = 256;
  // Room for about 1.5 requests of 100 prompt + 20 new tokens (+ tree rows): they must run one at a time.
  config.kv_budget_bytes = probe.kv_bytes_per_row() * 200;
  Engine engine(*pair.target, pair.drafter.get(), config);
  std::vector<Collected> got(4);
  RequestOptions o;
  o.max_new_tokens = 20;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 100; ++j) p.push_back((i * 5 + j * 3) % 15);
    prompts.push_back(p);
    engine.add({p, o}, collect(&got[i]));
  }
  int max_running = 0;
  while (!engine.idle()) {
    engine.step();
    max_running = std::max(max_running, engine.num_running());
    EXPECT_LE(engine.metrics().kv_reserved_perc, 1.0);
  }
  EXPECT_EQ(max_running, 1);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].finish, FinishReason::Length);
    EXPECT_EQ(got[i].ids, greedy_reference(*pair.target, prompts[i], 20)) << i;
  }
  // A request that could never fit the budget is rejected up front, with the reason.
  Request huge{std::vector<int32_t>(200, 1), o};
  try {
    engine.add(huge, nullptr);
    ADD_FAILURE() << "expected a rejection";
  } catch (const RequestRejected& e) {
    EXPECT_EQ(e.reason(), RejectReason::OverContext);
  }
}

TEST(Engine, RejectsBadRequestsWithAReason) {
  Pair pair = make_pair(16, 32, 1, 4, DType::F32, 53);
  EngineConfig config;
  config.max_context = 64;
  config.max_batch = 1;
  config.max_queue = 2;
  Engine engine(*pair.target, pair.drafter.get(), config);
  Engine plain_only(*pair.target, nullptr, config);
  auto reason = [](Engine& e, Request r) {
    try {
      e.add(std::move(r), nullptr);
    } catch (const RequestRejected& x) {
      return x.reason();
    }
    return RejectReason::None;
  };
  RequestOptions ok;
  ok.max_new_tokens = 4;
  RequestOptions hot = ok;
  hot.sampling.temperature = -1;
  RequestOptions top_p = ok;
  top_p.sampling.top_p = 0;
  RequestOptions negative = ok;
  negative.max_new_tokens = -1;
  RequestOptions bad_tree = ok;
  bad_tree.tree.node_cap = -3;
  EXPECT_EQ(reason(engine, {{}, ok}), RejectReason::BadParams);
  EXPECT_EQ(reason(engine, {{1, 99}, ok}), RejectReason::BadParams);
  EXPECT_EQ(reason(engine, {{1, -1}, ok}), RejectReason::BadParams);
  EXPECT_EQ(reason(engine, {{1}, hot}), RejectReason::BadParams);
  EXPECT_EQ(reason(engine, {{1}, top_p}), RejectReason::BadParams);
  EXPECT_EQ(reason(engine, {{1}, negative}), RejectReason::BadParams);
  EXPECT_EQ(reason(engine, {{1}, bad_tree}), RejectReason::BadParams);
  RequestOptions huge_tree = ok;
  huge_tree.tree.node_cap = 1 << 30;
  EXPECT_EQ(reason(engine, {{1}, huge_tree}), RejectReason::BadParams);
  EXPECT_EQ(reason(plain_only, {{1}, ok}), RejectReason::BadParams);  // mode Tree without a drafter
  EXPECT_EQ(reason(engine, {std::vector<int32_t>(64, 1), ok}), RejectReason::OverContext);
  EXPECT_EQ(reason(engine, {{1}, ok}), RejectReason::None);
  EXPECT_EQ(reason(engine, {{2}, ok}), RejectReason::None);
  EXPECT_EQ(reason(engine, {{3}, ok}), RejectReason::None);
  EXPECT_EQ(reason(engine, {{4}, ok}), RejectReason::QueueFull);  // max_batch 1 + max_queue 2 in progress
  EXPECT_TRUE(engine.idle() == false);
  while (!engine.idle()) engine.step();
}

TEST(Engine, ZeroNewTokensAndStopIds) {
  Pair pair = make_pair(16, 32, 1, 4, DType::F32, 59);
  Engine engine(*pair.target, pair.drafter.get(), EngineConfig{});
  const std::vector<int32_t> want = greedy_reference(*pair.target, {2, 4, 6}, 12);
  RequestOptions zero;
  zero.max_new_tokens = 0;
  RequestOptions stop;
  stop.max_new_tokens = 12;
  stop.stop_ids = {want[5]};
  Collected cz, cs;
  engine.add({{2, 4, 6}, zero}, collect(&cz));
  engine.add({{2, 4, 6}, stop}, collect(&cs));
  while (!engine.idle()) engine.step();
  EXPECT_EQ(cz.finish, FinishReason::Length);
  EXPECT_TRUE(cz.ids.empty());
  EXPECT_EQ(cs.finish, FinishReason::Stop);
  const size_t first = std::find(want.begin(), want.end(), want[5]) - want.begin();
  EXPECT_EQ(cs.ids, std::vector<int32_t>(want.begin(), want.begin() + first + 1));
}

// The debug line says what each adaptive request was priced at, and which were priced as probes.
TEST(Engine, ThePolicyLineMarksProbePricedRequests) {
  StepReport r;
  r.step = 7;
  r.batch = 2;
  r.modelled_ms = 4.5;
  r.step_ms = 4.75;
  r.decisions.push_back({3, true, 0.25, 2, 1, 2.4, 3, false});
  r.decisions.push_back({4, false, 0.25, 0, 0, 2.3, 3, true});
  EXPECT_EQ(describe_policy_step(r),
            "treespark policy: step 7 batch 2 predicted 4.5 ms actual 4.75 ms; [3 theta 0.25 nodes 2 acc 1 E 2.4 k 3] "
            "[4 plain E 2.3 k 3 probe-priced]");
  r.prefill_tokens = 64;
  r.modelled_ms = 0;
  EXPECT_EQ(describe_policy_step(r).substr(0, 59), "treespark policy: step 7 batch 2 prefill 64 actual 4.75 ms;");
}

}  // namespace
}  // namespace ts
