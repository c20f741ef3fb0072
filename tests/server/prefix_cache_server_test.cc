// The engine's prefix cache end to end through the server, on the shipped pair (models/) with the real batched
// engine: usage.prompt_tokens_details.cached_tokens (plain and streamed) is exactly the prefix an earlier request's
// context shares with the prompt (once it spans a whole block), the prompt's last token excluded; greedy output
// served from cached rows equals the output of a server without the cache; /metrics' prefix-cache counters move by
// the prompt and cached tokens; a chat's second turn reuses the first turn's answer; with the cache off nothing is
// reused and cache_config_info says so.
#include <algorithm>
#include <cstdio>

#include "core/cpu.h"
#include "engine/model_bundle.h"
#include "server/engine_backend.h"
#include "server/model_setup.h"
#include "server/engine_server.h"
#include "server/server_fixture.h"

namespace ts::server::testing {
namespace {

using nlohmann::json;

constexpr int kBlock = 16;  // EngineConfig::prefix_block_tokens' default, what serve runs with

// A shared prefix well over 100 tokens, then endings that differ from their first words on.
const std::string kPrefix =
    "The old lighthouse stood at the end of the harbour wall, its white paint peeling in long strips after forty "
    "winters of salt and wind. Every evening the keeper climbed the spiral stairs, one hundred and twelve steps, "
    "counting each one aloud as his father had taught him, and lit the great lamp that swept the bay. Fishermen "
    "coming home in the dark steered by its beam, and children in the village fell asleep watching the light "
    "cross their ceilings. One night in late autumn, a storm rolled in from the west and ";
const std::vector<std::string> kEndings = {"the keeper saw a small boat", "a bell began to ring somewhere below",
                                           "every window in the village went dark"};

// Tokens at the start of `a` and `b` that agree.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// A request that finished: its prompt and answer.
struct Finished {
  std::vector<int32_t> prompt, ids;
};

// What the prefix cache supplies for `prompt` after `finished` requests left their contexts: every row of the
// longest prefix the prompt shares with one of them, once that spans a whole block (the whole blocks are read in
// place, the rest copied from the entry that holds it), never the prompt's last token (always computed). A context
// holds the prompt and every answer token but the last, or all of them where the last round fed the last one back:
// the bounds {fewest, most}.
std::pair<int, int> expected_cached(const std::vector<int32_t>& prompt, const std::vector<Finished>& finished) {
  auto usable = [&](bool last_fed_back) {
    size_t shared = 0;
    for (const Finished& f : finished) {
      std::vector<int32_t> context = f.prompt;
      context.insert(context.end(), f.ids.begin(), f.ids.end() - (last_fed_back || f.ids.empty() ? 0 : 1));
      shared = std::max(shared, common_prefix(prompt, context));
    }
    shared = std::min(shared, prompt.size() - 1);
    return shared >= size_t(kBlock) ? int(shared) : 0;
  };
  return {usable(false), usable(true)};
}

#define EXPECT_CACHED(got, bounds)      \
  do {                                  \
    const auto [fewest, most] = bounds; \
    EXPECT_GE(got, fewest);             \
    EXPECT_LE(got, most);               \
  } while (0)

// The sample line of a Prometheus page that starts with `prefix` (empty when none).
std::string metric_line(const std::string& page, const std::string& prefix) {
  for (size_t pos = page.find(prefix); pos != std::string::npos; pos = page.find(prefix, pos + 1))
    if (pos == 0 || page[pos - 1] == '\n') return page.substr(pos, page.find('\n', pos) - pos);
  return "";
}

struct Answer {
  std::string text;
  std::vector<int32_t> ids;
  int prompt_tokens = -1, cached_tokens = -1;
};

class PrefixCacheServerTest : public ShippedPairServerTest {
 protected:
  // A fresh engine (an empty prefix cache) behind a fresh server; tree speculation at a fixed theta, so cached
  // drafter rows are read too.
  void start(bool prefix_cache) {
    stop();
    EngineConfig ec;
    ec.max_batch = 2;
    ec.max_queue = 4;
    ec.max_context = 512;
    ec.calibration = bundle_->calibration;
    ec.prefix_cache = prefix_cache;
    RequestOptions o;
    o.mode = DecodeMode::Tree;
    o.tree.theta = 0.05;
    o.tree.node_cap = 8;
    o.tree.branch_cap = 4;
    o.tree.draft_len = bundle_->drafter->block_size() - 1;
    o.adaptive = false;
    port_ = start_engine_server(*bundle_, ec, o, &backend_, &server_);
  }

  httplib::Result post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    return c.Post(path.c_str(), body.dump(), "application/json");
  }
  // A greedy request, streamed or not; the answer's text, token ids and usage.
  Answer ask(const std::string& path, json body, bool stream) {
    body["temperature"] = 0;
    body["return_token_ids"] = true;
    body["stream"] = stream;
    if (stream) body["stream_options"] = {{"include_usage", true}};
    Answer a;
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return a;
    EXPECT_EQ(r->status, 200) << r->body;
    const bool chat = path == "/v1/chat/completions";
    json usage;
    if (stream) {
      Sse s = parse_sse(r->body);
      EXPECT_TRUE(s.done);
      for (const json& e : s.events) {
        if (e.contains("usage") && !e["usage"].is_null()) usage = e["usage"];
        if (!e.contains("choices") || e["choices"].empty()) continue;
        const json& c = e["choices"][0];
        if (chat && c["delta"].contains("content") && c["delta"]["content"].is_string())
          a.text += c["delta"]["content"].get<std::string>();
        if (!chat && c.contains("text")) a.text += c["text"].get<std::string>();
        // The final chunk carries every generated id (return_token_ids).
        if (c.contains("token_ids") && c["token_ids"].is_array()) a.ids = c["token_ids"].get<std::vector<int32_t>>();
      }
      EXPECT_FALSE(usage.is_null()) << "no usage chunk with stream_options.include_usage";
    } else {
      json j = json::parse(r->body);
      const json& c = j["choices"][0];
      a.text = chat ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
      a.ids = c["token_ids"].get<std::vector<int32_t>>();
      usage = j["usage"];
    }
    if (usage.is_object()) {
      a.prompt_tokens = usage.value("prompt_tokens", -1);
      EXPECT_TRUE(usage.contains("prompt_tokens_details")) << usage.dump();
      if (usage.contains("prompt_tokens_details")) a.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"];
    }
    return a;
  }
  Answer complete(const std::string& prompt, bool stream = false, int max_tokens = 8) {
    return ask("/v1/completions", {{"prompt", prompt}, {"max_tokens", max_tokens}}, stream);
  }
  std::string metrics_page() {
    httplib::Client c("127.0.0.1", port_);
    auto m = c.Get("/metrics");
    EXPECT_TRUE(m);
    return m ? m->body : "";
  }
  std::vector<int32_t> encode(const std::string& text) const { return bundle_->tokenizer->encode(text); }
};

const std::string kModel = "{model_name=\"treespark-target\"";

// (a) cached_tokens in usage, plain and streamed, and the cached rows' answers equal an uncached server's.
TEST_F(PrefixCacheServerTest, CachedTokensReportedAndOutputEqualsUncachedServer) {
  start(/*prefix_cache=*/true);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Finished> stored;
  for (const std::string& e : kEndings) prompts.push_back(encode(kPrefix + e));
  ASSERT_GE(common_prefix(prompts[0], prompts[1]), size_t(100)) << "the prompts must share 100+ tokens";

  const Answer first = complete(kPrefix + kEndings[0]);
  EXPECT_EQ(first.prompt_tokens, int(prompts[0].size()));
  EXPECT_EQ(first.cached_tokens, 0) << "nothing to reuse on a fresh server";
  stored.push_back({prompts[0], first.ids});

  const Answer second = complete(kPrefix + kEndings[1]);
  EXPECT_EQ(second.prompt_tokens, int(prompts[1].size()));
  EXPECT_GT(second.cached_tokens, 0);
  EXPECT_LE(second.cached_tokens, second.prompt_tokens - 1) << "the prompt's last token is always computed";
  EXPECT_CACHED(second.cached_tokens, expected_cached(prompts[1], stored));  // every shared row is reused
  stored.push_back({prompts[1], second.ids});

  // Streaming: the usage chunk carries the same detail.
  const Answer third = complete(kPrefix + kEndings[2], /*stream=*/true);
  EXPECT_EQ(third.prompt_tokens, int(prompts[2].size()));
  EXPECT_GT(third.cached_tokens, 0);
  EXPECT_CACHED(third.cached_tokens, expected_cached(prompts[2], stored));

  std::printf("[prefix cache] prompts of %d, %d, %d tokens: cached %d, %d, %d (streamed)\n", first.prompt_tokens,
              second.prompt_tokens, third.prompt_tokens, first.cached_tokens, second.cached_tokens, third.cached_tokens);

  // The same requests on a server without the cache (computed from scratch): the same tokens and text.
  start(/*prefix_cache=*/false);
  const Answer second_uncached = complete(kPrefix + kEndings[1]);
  EXPECT_EQ(second_uncached.cached_tokens, 0);
  EXPECT_EQ(second.ids, second_uncached.ids);
  EXPECT_EQ(second.text, second_uncached.text);
  EXPECT_FALSE(second.text.empty());
  const Answer third_uncached = complete(kPrefix + kEndings[2], /*stream=*/true);
  EXPECT_EQ(third.ids, third_uncached.ids);
  EXPECT_EQ(third.text, third_uncached.text);
}

// (a) A prompt that repeats an earlier request's prompt and answer is served from the answer's blocks too, and
// still decodes what an uncached server decodes.
TEST_F(PrefixCacheServerTest, PromptExtendingAnEarlierAnswerReusesTheAnswer) {
  start(true);
  const std::string p1 = kPrefix + kEndings[0];
  const Answer first = complete(p1, false, 40);
  ASSERT_GE(first.ids.size(), size_t(2 * kBlock)) << "the answer should span blocks past the prompt";
  const std::string p2 = p1 + first.text + " Then";
  const std::vector<int32_t> ids1 = encode(p1), ids2 = encode(p2);
  const Answer second = complete(p2);
  EXPECT_CACHED(second.cached_tokens, expected_cached(ids2, {{ids1, first.ids}}));
  EXPECT_GT(second.cached_tokens, int(ids1.size()) / kBlock * kBlock) << "blocks of the answer were reused";
  std::printf("[prefix cache] prompt + answer (%zu + %zu tokens) + more: %d of %d prompt tokens cached\n",
              ids1.size(), first.ids.size(), second.cached_tokens, second.prompt_tokens);
  start(false);
  const Answer uncached = complete(p2);
  EXPECT_EQ(second.ids, uncached.ids);
  EXPECT_EQ(second.text, uncached.text);
}

// (b) /metrics: queries grow by the prompt tokens, hits by the cached tokens, computed by the rest; the cache's
// configuration is exported as vLLM exports it.
TEST_F(PrefixCacheServerTest, MetricsCountQueriesHitsAndComputedPromptTokens) {
  start(true);
  const std::string before = metrics_page();
  const double queries0 = metric_value(before, "vllm:prefix_cache_queries_total" + kModel);
  const double hits0 = metric_value(before, "vllm:prefix_cache_hits_total" + kModel);
  const double computed0 = metric_value(before, "treespark:prompt_tokens_computed_total" + kModel);

  const Answer a = complete(kPrefix + kEndings[0]);
  const Answer b = complete(kPrefix + kEndings[1]);
  ASSERT_GT(b.cached_tokens, 0);
  const double prompts = a.prompt_tokens + b.prompt_tokens, cached = a.cached_tokens + b.cached_tokens;

  // The engine's snapshot follows its steps: wait until the last step's counts are in.
  std::string after;
  wait_until(
      [&] {
        after = metrics_page();
        return metric_value(after, "treespark:prompt_tokens_computed_total" + kModel) - computed0 >=
               prompts - cached;
      },
      5.0);
  EXPECT_EQ(metric_value(after, "vllm:prefix_cache_queries_total" + kModel) - queries0, prompts);
  EXPECT_EQ(metric_value(after, "vllm:prefix_cache_hits_total" + kModel) - hits0, cached);
  EXPECT_EQ(metric_value(after, "treespark:prompt_tokens_computed_total" + kModel) - computed0, prompts - cached)
      << "cached prompt tokens are not prefilled again";
  EXPECT_GT(metric_value(after, "treespark:prefix_cache_blocks" + kModel), 0);

  const std::string info = metric_line(after, "vllm:cache_config_info{");
  ASSERT_FALSE(info.empty()) << "no vllm:cache_config_info";
  EXPECT_NE(info.find("block_size=\"16\""), std::string::npos) << info;
  EXPECT_NE(info.find("enable_prefix_caching=\"True\""), std::string::npos) << info;
  EXPECT_EQ(info.find("num_gpu_blocks=\"0\""), std::string::npos) << info;
  EXPECT_EQ(info.substr(info.rfind(' ') + 1), "1") << info;
}

// (c) A chat's second turn (turn 1's messages + the assistant's answer + a new user message) reuses turn 1's
// conversation: its prompt and the blocks of the answer, not just the system prompt.
TEST_F(PrefixCacheServerTest, SecondChatTurnReusesTheFirstTurnsAnswer) {
  start(true);
  json messages = json::array({{{"role", "system"},
                                {"content", "You are a patient storyteller. Answer in plain prose, no lists. " +
                                                kPrefix.substr(0, 200)}},
                               {{"role", "user"}, {"content", "Tell me a story about a lighthouse keeper."}}});
  const Answer t1 = ask("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 48}}, false);
  ASSERT_GT(t1.prompt_tokens, 0);
  ASSERT_GE(t1.ids.size(), size_t(2 * kBlock)) << "the answer should span blocks past the prompt";
  messages.push_back({{"role", "assistant"}, {"content", t1.text}});
  messages.push_back({{"role", "user"}, {"content", "What happened next?"}});
  const Answer t2 = ask("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}}, true);

  // Turn 2's prompt as the server renders it, and what turn 1 left in the cache.
  const tok::ChatTemplate& tmpl = *bundle_->chat_template;
  std::vector<tok::ChatMessage> m1, m2;
  for (size_t i = 0; i < messages.size(); ++i) {
    tok::ChatMessage m;
    m.role = messages[i]["role"];
    m.content = messages[i]["content"];
    if (i < 2) m1.push_back(m);
    m2.push_back(m);
  }
  const std::vector<int32_t> p1 = tmpl.encode_chat(*bundle_->tokenizer, m1, true, true);
  const std::vector<int32_t> p2 = tmpl.encode_chat(*bundle_->tokenizer, m2, true, true);
  ASSERT_EQ(int(p1.size()), t1.prompt_tokens);
  ASSERT_EQ(int(p2.size()), t2.prompt_tokens);
  std::printf("[prefix cache] chat: turn 1 %d prompt + %zu answer tokens; turn 2 %d prompt tokens, %d cached\n",
              t1.prompt_tokens, t1.ids.size(), t2.prompt_tokens, t2.cached_tokens);
  EXPECT_GT(t2.cached_tokens, t1.prompt_tokens / 2) << "most of turn 1's conversation is reused";
  EXPECT_GT(t2.cached_tokens, t1.prompt_tokens / kBlock * kBlock) << "the answer's blocks are reused too";
  EXPECT_CACHED(t2.cached_tokens, expected_cached(p2, {{p1, t1.ids}}));
}

// (d) With the cache off a repeated prompt is computed again, nothing is counted as a hit, and cache_config_info
// says the cache is off.
TEST_F(PrefixCacheServerTest, CacheOffReusesNothing) {
  start(/*prefix_cache=*/false);
  const Answer a = complete(kPrefix + kEndings[0]);
  const Answer b = complete(kPrefix + kEndings[0]);
  const Answer c = complete(kPrefix + kEndings[0], /*stream=*/true);
  EXPECT_EQ(a.cached_tokens, 0);
  EXPECT_EQ(b.cached_tokens, 0);
  EXPECT_EQ(c.cached_tokens, 0);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.ids, c.ids);
  std::string page;
  wait_until(
      [&] {
        page = metrics_page();
        return metric_value(page, "treespark:prompt_tokens_computed_total" + kModel) >= 3.0 * a.prompt_tokens;
      },
      5.0);
  EXPECT_EQ(metric_value(page, "treespark:prompt_tokens_computed_total" + kModel), 3.0 * a.prompt_tokens)
      << "every prompt token computed";
  EXPECT_EQ(metric_value(page, "vllm:prefix_cache_hits_total" + kModel), 0);
  EXPECT_EQ(metric_value(page, "treespark:prefix_cache_blocks" + kModel), 0);
  const std::string info = metric_line(page, "vllm:cache_config_info{");
  ASSERT_FALSE(info.empty()) << "no vllm:cache_config_info";
  EXPECT_NE(info.find("enable_prefix_caching=\"False\""), std::string::npos) << info;
}

}  // namespace
}  // namespace ts::server::testing
