// The API over real HTTP on loopback against a fake backend: response shapes, streaming format, usage and
// timings, stop strings, stop ids, /v1/models, /health, /metrics.
#include <thread>

#include "model/config.h"
#include "server/model_setup.h"
#include "server/server_fixture.h"

namespace ts::server::testing {
namespace {

using nlohmann::json;

TEST_F(ServerTest, CompletionReturnsScriptTextUsageAndTimings) {
  start();
  auto r = post("/v1/completions", json{{"prompt", "Say hello"}, {"max_tokens", 5}, {"temperature", 0}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "treespark-test");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  std::vector<int32_t> script = tokenizer().encode("Hello world, this is the fake backend speaking.");
  std::vector<int32_t> first5(script.begin(), script.begin() + 5);
  EXPECT_EQ(j["choices"][0]["text"], tokenizer().decode(first5));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const int prompt_tokens = int(tokenizer().encode("Say hello").size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt_tokens + 5);
  EXPECT_EQ(j["timings"]["prompt_n"], prompt_tokens);
  EXPECT_EQ(j["timings"]["predicted_n"], 5);
  EXPECT_EQ(j["timings"]["rounds"], 5);          // the fake: one event per round
  EXPECT_EQ(j["timings"]["draft_n"], 10);        // 2 draft tokens per round
  EXPECT_EQ(j["timings"]["draft_n_accepted"], 0);
  EXPECT_DOUBLE_EQ(j["timings"]["tokens_per_round"].get<double>(), 1.0);
  // What reached the backend: the tokenized prompt, the sampling parameters, the stop ids.
  auto sub = backend_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, tokenizer().encode("Say hello"));
  EXPECT_EQ(sub[0].options.max_new_tokens, 5);
  EXPECT_EQ(sub[0].options.sampling.temperature, 0.0f);
}

TEST_F(ServerTest, SamplingParametersReachTheBackend) {
  start();
  auto r = post("/v1/completions", json{{"prompt", {1, 2, 3}}, {"max_tokens", 2}, {"temperature", 0.7},
                                        {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"seed", 1234}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto sub = backend_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FLOAT_EQ(sub[0].options.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(sub[0].options.sampling.top_p, 0.9f);
  EXPECT_EQ(sub[0].options.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(sub[0].options.sampling.min_p, 0.05f);
  EXPECT_EQ(sub[0].options.sampling.seed, 1234u);
}

// serve --generation-config auto: the checkpoint's generation_config.json fills the sampling fields a body leaves
// out (Qwen2.5-Instruct's file, with a max_new_tokens), as vLLM applies it; the body's own values win.
TEST_F(ServerTest, GenerationConfigDefaultsFillWhatTheBodyLeavesOut) {
  sampling_defaults_ = sampling_defaults(parse_generation_config(
      R"({"do_sample": true, "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
          "max_new_tokens": 5})", "generation_config.json"));
  start();
  auto r = post("/v1/completions", json{{"prompt", {1, 2, 3}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  r = post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"temperature", 0.2},
                                        {"top_k", -1}, {"top_p", 1}, {"repetition_penalty", 1.0}, {"max_tokens", 9}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  r = post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto sub = backend_->submitted();
  ASSERT_EQ(sub.size(), 3u);
  EXPECT_FLOAT_EQ(sub[0].options.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(sub[0].options.sampling.top_p, 0.8f);
  EXPECT_EQ(sub[0].options.sampling.top_k, 20);
  EXPECT_EQ(sub[0].options.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(sub[0].options.repetition_penalty, 1.05f);
  EXPECT_EQ(sub[0].options.max_new_tokens, 5);  // min(16, the file's 5)
  EXPECT_FLOAT_EQ(sub[1].options.sampling.temperature, 0.2f);
  EXPECT_EQ(sub[1].options.sampling.top_k, 0);
  EXPECT_EQ(sub[1].options.sampling.top_p, 1.0f);
  EXPECT_EQ(sub[1].options.repetition_penalty, 1.0f);
  EXPECT_EQ(sub[1].options.max_new_tokens, 9);  // an explicit length is the client's
  EXPECT_EQ(sub[2].options.max_new_tokens, 5);  // chat: the room left, bounded by the file
  // do_sample false: greedy by default, whatever the file's temperature.
  sampling_defaults_ = sampling_defaults(parse_generation_config(R"({"do_sample": false, "temperature": 0.7})", "g"));
  EXPECT_EQ(sampling_defaults_.temperature, 0.0f);
  // Without a file: OpenAI's defaults.
  const SamplingDefaults none = sampling_defaults(GenerationConfig{});
  EXPECT_EQ(none.temperature, 1.0f);
  EXPECT_EQ(none.top_p, 1.0f);
  EXPECT_EQ(none.top_k, 0);
  EXPECT_EQ(none.repetition_penalty, 1.0f);
  EXPECT_EQ(none.max_tokens, 0);
}

// Without generation-config defaults a body that names no temperature samples at OpenAI's 1.
TEST_F(ServerTest, OpenAIDefaultsWithoutAGenerationConfig) {
  start();
  auto r = post("/v1/completions", json{{"prompt", {1, 2, 3}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto sub = backend_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].options.sampling.temperature, 1.0f);
  EXPECT_EQ(sub[0].options.sampling.top_p, 1.0f);
  EXPECT_EQ(sub[0].options.repetition_penalty, 1.0f);
  EXPECT_EQ(sub[0].options.max_new_tokens, 16);
}

TEST_F(ServerTest, ChatUsesTheTemplateAndHidesTheEndOfTurn) {
  FakeBackendOptions o;
  const SharedTokenizer& t = SharedTokenizer::get();
  o.script = t.tokenizer.encode("Paris.");
  o.script.push_back(t.tokenizer.token_id("<|im_end|>"));
  start(o);
  json messages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                               {{"role", "user"}, {"content", "Capital of France?"}}});
  auto r = post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 50}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], int(o.script.size()));  // the end-of-turn token counts
  auto sub = backend_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, t.chat.encode_chat(t.tokenizer, {{"system", "Be brief."}, {"user", "Capital of France?"}},
                                              true, true));
  EXPECT_EQ(sub[0].options.max_new_tokens, 50);
}

TEST_F(ServerTest, StreamingCompletionFormat) {
  FakeBackendOptions o;
  o.tokens_per_event = 3;
  start(o);
  auto r = post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 7}, {"stream", true},
                                        {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  Sse s = parse_sse(r->body);
  EXPECT_TRUE(s.done);
  ASSERT_GE(s.events.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 2 < s.events.size(); ++i) {
    const json& e = s.events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_TRUE(e["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(e.contains("usage") && e["usage"].is_null());  // include_usage: null until the last chunk
    text += e["choices"][0]["text"].get<std::string>();
  }
  const json& fin = s.events[s.events.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin.contains("usage") && fin["usage"].is_null());  // include_usage: usage comes once, next
  const json& usage = s.events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 7);
  EXPECT_EQ(usage["timings"]["rounds"], 3);  // 3 + 3 + 1 tokens
  EXPECT_EQ(usage["timings"]["draft_n_accepted"], 4);
  std::vector<int32_t> script = tokenizer().encode("Hello world, this is the fake backend speaking.");
  EXPECT_EQ(text, tokenizer().decode(std::vector<int32_t>(script.begin(), script.begin() + 7)));
  // Every chunk of one response has the same id.
  for (const json& e : s.events) EXPECT_EQ(e["id"], s.events[0]["id"]);
}

TEST_F(ServerTest, StreamingChatFormat) {
  start();
  auto r = post("/v1/chat/completions",
                json{{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 4},
                     {"stream", true}});
  ASSERT_TRUE(r);
  Sse s = parse_sse(r->body);
  EXPECT_TRUE(s.done);
  ASSERT_GE(s.events.size(), 3u);
  EXPECT_EQ(s.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(s.events[0].contains("usage"));  // no include_usage: no usage field on ordinary chunks
  std::string text;
  for (size_t i = 1; i + 1 < s.events.size(); ++i) text += s.events[i]["choices"][0]["delta"]["content"].get<std::string>();
  const json& fin = s.events.back();
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["usage"]["completion_tokens"], 4);  // usage on the last chunk even without include_usage
  std::vector<int32_t> script = tokenizer().encode("Hello world, this is the fake backend speaking.");
  EXPECT_EQ(text, tokenizer().decode(std::vector<int32_t>(script.begin(), script.begin() + 4)));
}

TEST_F(ServerTest, StopStringCutsTheTextAndCancelsTheBackend) {
  start();
  for (bool stream : {false, true}) {
    auto r = post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 200}, {"stop", {"fake", "zzz"}},
                                          {"stream", stream}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string text, reason;
    int completion_tokens = -1;
    if (stream) {
      Sse s = parse_sse(r->body);
      ASSERT_TRUE(s.done);
      for (const json& e : s.events) text += e["choices"][0]["text"].get<std::string>();
      reason = s.events.back()["choices"][0]["finish_reason"];
      completion_tokens = s.events.back()["usage"]["completion_tokens"];
    } else {
      json j = json::parse(r->body);
      text = j["choices"][0]["text"];
      reason = j["choices"][0]["finish_reason"];
      completion_tokens = j["usage"]["completion_tokens"];
    }
    EXPECT_EQ(text, "Hello world, this is the ") << "stream=" << stream;
    EXPECT_EQ(reason, "stop");
    // Tokens up to the one that completed "fake" count; the backend was cancelled, not run to 200.
    EXPECT_LT(completion_tokens, 12);
  }
  EXPECT_EQ(backend_->cancelled(), 2);
}

TEST_F(ServerTest, StopStringPrefixIsHeldBackThenReleased) {
  start();
  // "wor" starts "world!" but the text goes on "world," -- the held-back prefix must come out in full.
  auto r = post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 6}, {"stop", "world!"}, {"stream", true}});
  ASSERT_TRUE(r);
  Sse s = parse_sse(r->body);
  std::string text;
  for (const json& e : s.events) text += e["choices"][0]["text"].get<std::string>();
  std::vector<int32_t> script = tokenizer().encode("Hello world, this is the fake backend speaking.");
  EXPECT_EQ(text, tokenizer().decode(std::vector<int32_t>(script.begin(), script.begin() + 6)));
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, ReturnTokenIds) {
  start();
  auto r = post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 3}, {"return_token_ids", true}});
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  std::vector<int32_t> script = tokenizer().encode("Hello world, this is the fake backend speaking.");
  EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(),
            std::vector<int32_t>(script.begin(), script.begin() + 3));
}

TEST_F(ServerTest, ModelsEndpoint) {
  start();
  auto r = get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "treespark-test");
  EXPECT_EQ(j["data"][0]["max_model_len"], 256);
  // Retrieve one model by id (OpenAI's models.retrieve); another id is 404.
  auto one = get("/v1/models/treespark-test");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->status, 200);
  const json m = json::parse(one->body);
  EXPECT_EQ(m["id"], "treespark-test");
  EXPECT_EQ(m["object"], "model");
  auto other = get("/v1/models/gpt-4");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body)["error"]["code"], "model_not_found");
}

TEST_F(ServerTest, HealthIs503WhileLoadingThenOk) {
  start_loading();
  auto r = get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "loading");
  auto c = post("/v1/completions", json{{"prompt", "x"}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 503);
  EXPECT_FALSE(c->get_header_value("Retry-After").empty());
  ready();
  r = get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body), json({{"status", "ok"}}));
}

TEST_F(ServerTest, MetricsCountersMove) {
  FakeBackendOptions o;
  o.tokens_per_event = 2;
  start(o);
  auto page0 = get("/metrics");
  ASSERT_TRUE(page0);
  ASSERT_EQ(page0->status, 200);
  EXPECT_NE(page0->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string L = "{model_name=\"treespark-test\"";
  EXPECT_EQ(metric_value(page0->body, "vllm:generation_tokens_total" + L), 0);
  EXPECT_EQ(metric_value(page0->body, "vllm:num_requests_running" + L), 0);
  EXPECT_EQ(metric_value(page0->body, "vllm:time_to_first_token_seconds_count" + L), 0);

  auto r = post("/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 6}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  auto bad = post("/v1/completions", std::string("{not json"));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  auto page = get("/metrics");
  ASSERT_TRUE(page);
  const std::string& m = page->body;
  EXPECT_EQ(metric_value(m, "vllm:generation_tokens_total" + L), 6);
  EXPECT_EQ(metric_value(m, "vllm:prompt_tokens_total" + L), double(tokenizer().encode("abc").size()));
  EXPECT_EQ(metric_value(m, "vllm:request_success_total" + L + ",finished_reason=\"length\""), 1);
  EXPECT_EQ(metric_value(m, "vllm:time_to_first_token_seconds_count" + L), 1);
  EXPECT_EQ(metric_value(m, "vllm:inter_token_latency_seconds_count" + L), 4);  // tokens after the first event
  EXPECT_EQ(metric_value(m, "vllm:e2e_request_latency_seconds_count" + L), 1);
  EXPECT_EQ(metric_value(m, "vllm:spec_decode_num_drafts_total" + L), 3);
  EXPECT_EQ(metric_value(m, "vllm:spec_decode_num_draft_tokens_total" + L), 12);
  EXPECT_EQ(metric_value(m, "vllm:spec_decode_num_accepted_tokens_total" + L), 3);
  EXPECT_EQ(metric_value(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total" + L + ",position=\"0\""), 3);
  EXPECT_EQ(metric_value(m, "vllm:kv_cache_usage_perc" + L), 0);
  EXPECT_EQ(metric_value(m, "treespark:http_errors_total" + L + ",status=\"400\""), 1);
  EXPECT_EQ(metric_value(m, "treespark:spec_decode_tree_node_ms" + L), 42);  // the fake's fixed gauge
  // Engine counters are Prometheus counters named *_total; no gauge carries that suffix.
  EXPECT_EQ(metric_value(m, "treespark:engine_steps_total" + L), 7);  // the fake's fixed counter
  EXPECT_NE(m.find("# TYPE treespark:engine_steps_total counter"), std::string::npos);
  EXPECT_NE(m.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(m.find("vllm:time_to_first_token_seconds_bucket" + L + ",le=\"+Inf\"} 1"), std::string::npos);
}

TEST_F(ServerTest, ManyConcurrentStreamsAllComplete) {
  FakeBackendOptions o;
  o.max_running = 4;
  o.max_waiting = 64;
  start(o);
  constexpr int kClients = 64;  // a burst past httplib's listen backlog of 5
  std::vector<std::thread> threads;
  std::vector<int> ok(kClients, 0);
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      auto r = post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 8}, {"stream", i % 2 == 0}});
      if (!r) {
        std::printf("client %d: %s\n", i, httplib::to_string(r.error()).c_str());
        return;
      }
      if (r->status != 200) {
        std::printf("client %d: %d %s\n", i, r->status, r->body.c_str());
        return;
      }
      if (i % 2 == 0) {
        Sse s = parse_sse(r->body);
        ok[i] = s.done && s.events.back()["usage"]["completion_tokens"] == 8;
      } else {
        ok[i] = json::parse(r->body)["usage"]["completion_tokens"] == 8;
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_TRUE(ok[i]) << "client " << i;
}

}  // namespace
}  // namespace ts::server::testing
