// The prefix cache inside the engine, on the random tiny pair and the shipped pair: a request served from cached
// blocks (a shared prompt prefix, or the previous turn's prompt and answer) emits the same tokens with bit-identical
// logprobs as on an engine without the cache, in plain, chain and tree modes, greedy and seeded-sampled, with hits
// on and off block boundaries; sampled trees keep the target distribution with a cached prefix; the cache stays
// inside the KV budget beside the reservations; a cancelled request pins nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/test_subjects.h"
#include "engine/tiny_pair.h"

namespace ts {
namespace {

using testing::make_pair;
using testing::Pair;

struct Output {
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> logprobs;
  RequestStats stats;
  FinishReason finish = FinishReason::None;
};

EventCallback collect(Output* out) {
  return [out](const RequestEvent& e) {
    out->ids.insert(out->ids.end(), e.tokens.begin(), e.tokens.end());
    out->logprobs.insert(out->logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    if (e.finish == FinishReason::None) return;
    out->finish = e.finish;
    out->stats = *e.stats;
  };
}

Output run(Engine& engine, const std::vector<int32_t>& prompt, const RequestOptions& o) {
  Output out;
  engine.add({prompt, o}, collect(&out));
  while (!engine.idle()) engine.step();
  return out;
}

void expect_same(const Output& cached, const Output& cold, const std::string& what) {
  ASSERT_EQ(cached.ids, cold.ids) << what;
  ASSERT_EQ(cached.logprobs.size(), cold.logprobs.size()) << what;
  for (size_t i = 0; i < cold.logprobs.size(); ++i) {
    // Bit-identical: the same logits give the same floats.
    EXPECT_EQ(cached.logprobs[i].logprob, cold.logprobs[i].logprob) << what << " token " << i;
    EXPECT_EQ(cached.logprobs[i].top, cold.logprobs[i].top) << what << " token " << i;
  }
}

// A config of max_batch requests and prefill_chunk tokens per step whose KV budget holds budget_rows rows of the pair.
EngineConfig budgeted_config(const Pair& pair, int max_batch, int prefill_chunk, int64_t budget_rows) {
  EngineConfig config;
  config.max_batch = max_batch;
  config.prefill_chunk = prefill_chunk;
  Engine probe(*pair.target, pair.drafter.get(), config);
  config.kv_budget_bytes = budget_rows * probe.kv_bytes_per_row();
  return config;
}

// Between steps: the admitted requests' own reservations plus every row the cache holds (its pinned blocks, which
// kv_reserved_perc counts too, once) stay within the KV budget.
::testing::AssertionResult within_budget(const Engine& engine, double budget_rows) {
  const double reserved = engine.metrics().kv_reserved_perc * budget_rows;
  const double pinned = double(engine.prefix_cache()->pinned_rows()), held = double(engine.prefix_cache()->rows());
  if (reserved - pinned + held <= budget_rows + 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "reserved " << reserved << " - pinned " << pinned << " + cached " << held
                                       << " rows over the budget of " << budget_rows;
}

RequestOptions options(DecodeMode mode, float temperature, uint64_t seed, int max_new) {
  GenerateOptions o = testing::with_mode(GenerateOptions{}, mode);
  o.max_new_tokens = max_new;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.logprobs = 5;
  return o;
}

// Turn 1 runs a prompt; turn 2 sends turn 1's prompt + answer + new tokens (a chat), and a third request shares only
// a prefix of turn 1's prompt cut at `cut` tokens. Each is compared with the same request on a cold engine.
void check_subject(testing::Subject& s, int block_tokens, DecodeMode mode, float temperature) {
  const std::string what = s.name + ", blocks of " + std::to_string(block_tokens) + ", mode " +
                           std::to_string(int(mode)) + ", T " + std::to_string(temperature);
  EngineConfig warm_config, cold_config;
  warm_config.prefix_block_tokens = block_tokens;
  cold_config = warm_config;
  cold_config.prefix_cache = false;
  Engine warm(*s.pair.target, s.pair.drafter.get(), warm_config);
  Engine cold(*s.pair.target, s.pair.drafter.get(), cold_config);
  const int V = s.pair.target->config().vocab_size;
  std::vector<int32_t> first = s.prompts[0];
  // Off block boundaries, and long enough for the cuts below.
  while (int(first.size()) < std::max(39, 2 * block_tokens + 5))
    first.push_back(int32_t((first.size() * 7 + 3) % (V - 1)));
  auto options = [&](DecodeMode m, float temp, uint64_t seed, int max_new) {
    RequestOptions o = ts::options(m, temp, seed, max_new);
    o.calibration = s.calibration;
    return o;
  };
  const RequestOptions o = options(mode, temperature, 17, 12);

  const Output turn1 = run(warm, first, o);
  EXPECT_EQ(turn1.stats.cached_prompt_tokens, 0) << what;
  expect_same(turn1, run(cold, first, o), what + ", turn 1");

  std::vector<int32_t> second = first;
  second.insert(second.end(), turn1.ids.begin(), turn1.ids.end());
  for (int i = 0; i < 5; ++i) second.push_back(int32_t((i * 5 + 1) % (V - 1)));
  const Output turn2 = run(warm, second, options(mode, temperature, 18, 12));
  // Every row of turn 1's context (its prompt and the answer tokens fed back) is reused: its whole blocks in place,
  // its last partial block (the tail it left) copied.
  // (Speculating, the last round also fed its anchor back: one row more.) Never rows past the tokens it emitted.
  const int context1 = int(first.size() + turn1.ids.size()) - 1;
  EXPECT_GE(turn2.stats.cached_prompt_tokens, context1) << what;
  EXPECT_LE(turn2.stats.cached_prompt_tokens, context1 + 1) << what;
  EXPECT_NE(context1 % block_tokens, 0) << what << ": the test wants a tail";
  EXPECT_GT(turn2.stats.cached_prompt_tokens, int(first.size()) / 2) << what;
  expect_same(turn2, run(cold, second, options(mode, temperature, 18, 12)), what + ", turn 2");

  // A round cut short by max_new_tokens kept rows of accepted tokens it did not emit: whatever token follows the
  // answer (here 0 and 2; turn 2 sent 1), only rows of the request's own tokens are reused.
  for (int32_t next : {0, 2}) {
    std::vector<int32_t> after = first;
    after.insert(after.end(), turn1.ids.begin(), turn1.ids.end());
    after.push_back(next);
    after.push_back(3);
    const Output got = run(warm, after, options(mode, temperature, 20, 4));
    EXPECT_LE(got.stats.cached_prompt_tokens, int(first.size() + turn1.ids.size())) << what << ", then " << next;
    expect_same(got, run(cold, after, options(mode, temperature, 20, 4)), what + ", then " + std::to_string(next));
  }

  for (int cut : {block_tokens * 2, block_tokens * 2 + 1}) {
    std::vector<int32_t> third(first.begin(), first.begin() + cut);
    third.push_back(int32_t(V - 2));
    const Output shared = run(warm, third, options(mode, temperature, 19, 8));
    // Two whole blocks; with cut = 2 blocks + 1, also the first row of turn 1's third block (it diverges after it).
    EXPECT_EQ(shared.stats.cached_prompt_tokens, cut) << what << ", cut " << cut;
    expect_same(shared, run(cold, third, options(mode, temperature, 19, 8)), what + ", cut " + std::to_string(cut));
  }
  const EngineMetrics m = warm.metrics();
  EXPECT_GT(m.prefix_cache_hits, 0) << what;
  EXPECT_EQ(m.prompt_tokens, m.prompt_tokens_computed + m.prefix_cache_hits) << what;
  EXPECT_EQ(cold.metrics().prefix_cache_queries, 0) << what;
}

TEST(PrefixCacheEngine, CachedRequestsEqualColdOnesInEveryMode) {
  for (testing::Subject& s : testing::subjects())
    for (int block : {16, 32})
      for (DecodeMode mode : testing::kModes)
        for (float t : {0.0f, 0.8f}) check_subject(s, block, mode, t);
}

TEST(PrefixCacheEngine, SpeculatingRequestsReuseOnlyBlocksWithDrafterRows) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 12);
  Engine engine(*pair.target, pair.drafter.get(), EngineConfig{});  // blocks of 16
  std::vector<int32_t> prompt;
  for (int i = 0; i < 81; ++i) prompt.push_back(int32_t((i * 3 + 1) % 19));
  RequestOptions plain = options(DecodeMode::None, 0, 1, 2), tree = options(DecodeMode::Tree, 0, 1, 2);
  run(engine, prompt, plain);
  EXPECT_EQ(run(engine, prompt, plain).stats.cached_prompt_tokens, 80);
  // The plain requests stored no drafter context: a speculating one computes it (and stores it for the next).
  EXPECT_EQ(run(engine, prompt, tree).stats.cached_prompt_tokens, 0);
  EXPECT_EQ(run(engine, prompt, tree).stats.cached_prompt_tokens, 80);
  EXPECT_EQ(run(engine, prompt, plain).stats.cached_prompt_tokens, 80);
}

TEST(PrefixCacheEngine, CacheStaysInsideTheBudgetAndCancelledRequestsPinNothing) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 13);
  EngineConfig config = budgeted_config(pair, 3, 32, 1200);  // room for about 3 requests and a few blocks
  Engine engine(*pair.target, pair.drafter.get(), config);
  const double budget_rows = 1200;
  std::vector<Output> outs(40);
  for (int r = 0; r < 40; ++r) {
    std::vector<int32_t> prompt;
    // A shared 48-token system prompt, then one of 8 user prompts (each sent 5 times).
    for (int i = 0; i < 120 + r % 7; ++i) prompt.push_back(int32_t(i < 48 ? i % 19 : (i * (r % 8 + 1)) % 19));
    RequestOptions o = options(r % 2 ? DecodeMode::Tree : DecodeMode::None, 0, 1, 20);
    o.max_context = 200;
    engine.add({prompt, o}, collect(&outs[r]));
  }
  RequestId cancelled = 0;
  Output cancelled_out;  // outlives the engine's events for the cancelled request
  int steps = 0;
  while (!engine.idle()) {
    engine.step();
    ASSERT_TRUE(within_budget(engine, budget_rows)) << "step " << steps;
    const EngineMetrics m = engine.metrics();
    ASSERT_LE(m.kv_cache_usage_perc, 1.0) << "step " << steps;
    if (++steps == 3) {  // one request mid-prefill: cancel it
      std::vector<int32_t> longp(180, 3);
      RequestOptions o = options(DecodeMode::Tree, 0, 1, 5);
      cancelled = engine.add({longp, o}, collect(&cancelled_out));
    }
    if (steps == 200) engine.cancel(cancelled);
  }
  for (const Output& o : outs) EXPECT_NE(o.finish, FinishReason::Error);
  EXPECT_GT(engine.metrics().prefix_cache_hits, 0);
  EXPECT_GT(engine.metrics().prefix_cache_blocks, 0);
  // Nothing stays pinned: every block can be evicted.
  for (const PrefixCache::Block* b : engine.prefix_cache()->all()) EXPECT_EQ(b->refs, 0);
}

// Requests read a shared prefix in place: its blocks are pinned while they run and counted once in the KV budget,
// so admission reserves only each request's own rows. The budget here holds three requests' own rows and the shared
// prefix once, not three whole reservations; all three run together, and give a cold engine's outputs.
TEST(PrefixCacheEngine, AdmissionReservesOnlyTheRowsARequestDoesNotShare) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 17);
  std::vector<int32_t> system;
  for (int i = 0; i < 160; ++i) system.push_back(int32_t((i * 7 + 2) % 19));
  auto prompt = [&](int r) {
    std::vector<int32_t> p = system;
    for (int i = 0; i < 9; ++i) p.push_back(int32_t((r * 5 + i) % 19));
    return p;
  };
  const RequestOptions o = options(DecodeMode::Tree, 0, 1, 6);
  EngineConfig config;
  config.prefix_cache = false;
  Engine cold(*pair.target, pair.drafter.get(), config);
  Output probe;
  cold.add({prompt(0), o}, collect(&probe));
  cold.step();
  const double budget_rows = double(cold.config().kv_budget_bytes / cold.kv_bytes_per_row());
  const double whole = cold.metrics().kv_reserved_perc * budget_rows;  // one request's reservation
  while (!cold.idle()) cold.step();
  ASSERT_GT(whole, 160);
  config.prefix_cache = true;
  config.kv_budget_bytes = int64_t(160 + 3 * (whole - 160) + 40) * cold.kv_bytes_per_row();  // < 3 x whole
  ASSERT_LT(config.kv_budget_bytes, int64_t(3 * whole) * cold.kv_bytes_per_row());
  Engine warm(*pair.target, pair.drafter.get(), config);
  run(warm, prompt(9), o);  // stores the system prompt's 10 blocks
  std::vector<Output> got(3);
  for (int r = 0; r < 3; ++r) warm.add({prompt(r), o}, collect(&got[r]));
  warm.step();
  EXPECT_EQ(warm.metrics().num_requests_running, 3);
  EXPECT_EQ(warm.prefix_cache()->pinned_rows(), 160);
  for (const PrefixCache::Block* b : warm.prefix_cache()->all())
    EXPECT_TRUE(b->refs == 0 || b->refs == 3);  // one pin per request reading it
  while (!warm.idle()) warm.step();
  EXPECT_EQ(warm.prefix_cache()->pinned_rows(), 0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].stats.cached_prompt_tokens, 160);
    Output want;
    cold.add({prompt(r), o}, collect(&want));
    while (!cold.idle()) cold.step();
    expect_same(got[r], want, "request " + std::to_string(r));
  }
}

// A burst of requests with one system prompt, admitted together: while the first prefills the shared prompt chunk
// by chunk, the others (admitted, not started) take the blocks it stores; every output equals a cold engine's.
TEST(PrefixCacheEngine, RequestsAdmittedTogetherShareBlocksStoredWhileTheyWait) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 14);
  EngineConfig config;
  config.max_batch = 4;
  config.prefill_chunk = 32;
  Engine warm(*pair.target, pair.drafter.get(), config);
  config.prefix_cache = false;
  Engine cold(*pair.target, pair.drafter.get(), config);
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 80; ++i) p.push_back(int32_t((i * 7 + 2) % 19));
    for (int i = 0; i < 5; ++i) p.push_back(int32_t((r * 3 + i) % 19));
    prompts.push_back(p);
  }
  for (DecodeMode mode : {DecodeMode::None, DecodeMode::Tree}) {
    std::vector<Output> got(4), want(4);
    for (int r = 0; r < 4; ++r) {
      warm.add({prompts[r], options(mode, 0, 1, 6)}, collect(&got[r]));
      cold.add({prompts[r], options(mode, 0, 1, 6)}, collect(&want[r]));
    }
    while (!warm.idle()) warm.step();
    while (!cold.idle()) cold.step();
    int shared = 0;
    for (int r = 0; r < 4; ++r) {
      expect_same(got[r], want[r], "request " + std::to_string(r));
      shared += got[r].stats.cached_prompt_tokens >= 64;
    }
    EXPECT_GE(shared, 3) << "mode " << int(mode);
  }
}

// Cancelled mid-prefill: the request's reservation goes, the blocks its chunks stored stay cached and unpinned
// (a later request with the same prompt reuses them), and the request beside it is unaffected.
TEST(PrefixCacheEngine, CancellationMidPrefillReleasesItsReservationAndKeepsItsBlocksReusable) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 15);
  EngineConfig config;
  config.max_batch = 2;
  config.prefill_chunk = 32;
  Engine warm(*pair.target, pair.drafter.get(), config);
  config.prefix_cache = false;
  Engine cold(*pair.target, pair.drafter.get(), config);
  std::vector<int32_t> other = {3, 1, 4, 1, 5, 9, 2, 6}, longp;
  for (int i = 0; i < 240; ++i) longp.push_back(int32_t((i * 5 + 3) % 19));
  Output a, b, want;
  const RequestId id = warm.add({longp, options(DecodeMode::Tree, 0, 1, 8)}, collect(&a));
  warm.add({other, options(DecodeMode::Tree, 0, 1, 8)}, collect(&b));
  warm.step();
  warm.step();  // 64 of its 240 prompt tokens are in (the chunks go to the earlier request first)
  EXPECT_GT(warm.metrics().kv_reserved_perc, 0);
  warm.cancel(id);
  while (!warm.idle()) warm.step();
  EXPECT_EQ(a.finish, FinishReason::Cancelled);
  EXPECT_EQ(warm.metrics().kv_reserved_perc, 0);
  for (const PrefixCache::Block* blk : warm.prefix_cache()->all()) EXPECT_EQ(blk->refs, 0);
  EXPECT_GE(warm.prefix_cache()->blocks(), 4);  // its two chunks' blocks
  cold.add({other, options(DecodeMode::Tree, 0, 1, 8)}, collect(&want));
  while (!cold.idle()) cold.step();
  expect_same(b, want, "the request beside the cancelled one");
  const Output again = run(warm, longp, options(DecodeMode::Tree, 0, 1, 8));
  EXPECT_GE(again.stats.cached_prompt_tokens, 64);
  expect_same(again, run(cold, longp, options(DecodeMode::Tree, 0, 1, 8)), "the cancelled prompt, sent again");
}

// A request cancelled while decoding (a chat client that went away) leaves its prompt and the answer so far in the
// cache: the next turn, built on that partial answer, reuses them.
TEST(PrefixCacheEngine, ACancelledRequestsPromptAndPartialAnswerStayReusable) {
  Pair pair = make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 16);
  EngineConfig config;
  Engine warm(*pair.target, pair.drafter.get(), config);
  config.prefix_cache = false;
  Engine cold(*pair.target, pair.drafter.get(), config);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 120; ++i) prompt.push_back(int32_t((i * 7 + 1) % 19));
  Output partial;
  const RequestId id = warm.add({prompt, options(DecodeMode::Tree, 0, 1, 60)}, collect(&partial));
  while (partial.ids.size() < 10) warm.step();
  warm.cancel(id);
  warm.step();
  ASSERT_EQ(partial.finish, FinishReason::Cancelled);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), partial.ids.begin(), partial.ids.end());
  next.push_back(3);
  const Output turn = run(warm, next, options(DecodeMode::Tree, 0, 2, 8));
  // Its context held the prompt and every answer token but the last (not yet fed back, or fed back by its last
  // round): every row of it is reused, the whole blocks in place and the tail copied.
  const int held = int(prompt.size() + partial.ids.size()) - 1;
  EXPECT_GE(turn.stats.cached_prompt_tokens, held);
  EXPECT_LE(turn.stats.cached_prompt_tokens, held + 1);
  expect_same(turn, run(cold, next, options(DecodeMode::Tree, 0, 2, 8)), "the turn after a cancelled answer");
}

// Differential stress: chats and shared system prompts from a few clients at once, under a KV budget that forces
// evictions, with cancellations: every request that finishes emits what a cold engine emits for the same request
// (greedy, plain and tree, bit-identical logprobs), the budget holds at every step, and nothing stays pinned.
TEST(PrefixCacheEngine, ConcurrentChatsUnderEvictionEqualAColdEngine) {
  Pair pair = make_pair(/*vocab=*/24, /*hidden=*/32, /*layers=*/2, /*block=*/5, DType::BF16, 18);
  EngineConfig config = budgeted_config(pair, 3, 48, 650);  // about two or three requests' reservations
  int removed = 0;  // blocks evicted (BlockRemoved events)
  config.on_kv_events = [&removed](const std::vector<KvCacheEvent>& events) {
    for (const KvCacheEvent& e : events)
      if (e.kind == KvCacheEvent::Kind::BlockRemoved) removed += int(e.block_hashes.size());
  };
  Engine warm(*pair.target, pair.drafter.get(), config);
  config.prefix_cache = false;
  config.kv_budget_bytes = 0;
  config.on_kv_events = nullptr;
  Engine cold(*pair.target, pair.drafter.get(), config);
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> systems(3);
  for (auto& sys : systems)
    for (int i = 0; i < 40; ++i) sys.push_back(int32_t(rng() % 23));
  struct Chat {
    std::vector<int32_t> conversation;
    RequestOptions options;
  };
  std::vector<Chat> chats(8);
  for (size_t c = 0; c < chats.size(); ++c) {
    chats[c].conversation = systems[c % systems.size()];
    chats[c].options = options(c % 2 ? DecodeMode::Tree : DecodeMode::None, 0, 1, 6 + int(c % 3) * 3);
    chats[c].options.max_context = 260;
  }
  const double budget_rows = 650;
  int checked = 0, cancelled = 0, reused = 0;
  for (int round = 0; round < 8; ++round) {
    // Every chat sends its next turn; all run together.
    std::vector<Output> got(chats.size());
    std::vector<RequestId> ids(chats.size());
    for (size_t c = 0; c < chats.size(); ++c) {
      for (int i = 0; i < 5 + int(rng() % 12); ++i) chats[c].conversation.push_back(int32_t(rng() % 23));
      ids[c] = warm.add({chats[c].conversation, chats[c].options}, collect(&got[c]));
    }
    const int victim = int(rng() % chats.size());
    for (int step = 0; !warm.idle(); ++step) {
      warm.step();
      if (step == 2) warm.cancel(ids[size_t(victim)]);
      ASSERT_TRUE(within_budget(warm, budget_rows)) << "round " << round << " step " << step;
    }
    for (size_t c = 0; c < chats.size(); ++c) {
      if (got[c].finish == FinishReason::Cancelled) {
        ++cancelled;
        continue;
      }
      const std::string what = "round " + std::to_string(round) + " chat " + std::to_string(c);
      ASSERT_NE(got[c].finish, FinishReason::Error) << what;
      expect_same(got[c], run(cold, chats[c].conversation, chats[c].options), what);
      reused += got[c].stats.cached_prompt_tokens > 0;
      chats[c].conversation.insert(chats[c].conversation.end(), got[c].ids.begin(), got[c].ids.end());
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
  EXPECT_GE(reused, checked / 2);
  EXPECT_GT(warm.metrics().prefix_cache_hits, 0);
  EXPECT_EQ(warm.prefix_cache()->pinned_rows(), 0);
  EXPECT_GT(removed, 0) << "the budget did not force evictions";
  std::printf("stress: %d requests checked, %d reused cached rows, %d cancelled; %d blocks evicted, %lld held\n",
              checked, reused, cancelled, removed, (long long)warm.prefix_cache()->blocks());
}

// The statistical test of engine_test.cc with the prompt's first blocks served from the cache on every request
// after the first (one block of 16 tokens in place, then the 4 rows an earlier request's tail or diverging block holds,
// copied): the continuations still follow the target distribution.
TEST(PrefixCacheEngine, SampledTreesWithACachedPrefixKeepTheTargetDistribution) {
  Pair pair = make_pair(/*vocab=*/8, /*hidden=*/32, /*layers=*/1, /*block=*/4, DType::F32, 79);
  const std::vector<int32_t> prompt = {1, 5, 2, 6, 3, 7, 0, 4, 2, 2, 5, 1, 6, 3, 0, 7, 1, 5, 2, 6, 3};
  RequestOptions o;
  o.max_new_tokens = 3;
  o.sampling.temperature = 1.0f;
  o.mode = DecodeMode::Tree;
  o.tree.theta = 0;
  o.tree.node_cap = 6;
  o.tree.branch_cap = 3;
  std::map<std::vector<int32_t>, double> exact, count;
  testing::exact_continuations(*pair.target, prompt, 3, o.sampling, &exact);
  ASSERT_GT(exact.size(), 20u);
  EngineConfig config;
  Engine engine(*pair.target, pair.drafter.get(), config);  // blocks of 16
  const int N = 6000;
  for (int i = 0; i < N; ++i) {
    o.sampling.seed = 9000 + i;
    Output out = run(engine, prompt, o);
    ASSERT_EQ(out.ids.size(), 3u);
    if (i > 0) {
      ASSERT_EQ(out.stats.cached_prompt_tokens, 20);
    }
    count[out.ids] += 1.0 / N;
  }
  const auto [tv, bound] = testing::tv_and_bound(exact, count, N);
  std::printf("cached prefix, T=1: TV %.4f bound %.4f\n", tv, bound);
  EXPECT_LT(tv, bound);
}

}  // namespace
}  // namespace ts
