// logprobs / top_logprobs in OpenAI's two shapes (completions and chat, JSON and streamed), and logit_bias,
// min_tokens and ignore_eos reaching the backend, through the HTTP server over the fake backend (whose logprobs
// follow fake_logprobs()).
#include <algorithm>

#include "server/server_fixture.h"

namespace ts::server::testing {
namespace {

using nlohmann::json;

TEST_F(ServerTest, CompletionLogprobsListEveryTokenWithItsTopK) {
  start();
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 6}, {"logprobs", 3}, {"return_token_ids", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  const json& lp = choice["logprobs"];
  const json& ids = choice["token_ids"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    const int32_t id = ids[i];
    EXPECT_EQ(lp["tokens"][i], tokenizer().decode({id}));
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), fake_logprobs(id, int(i), 3).logprob);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u);
    EXPECT_FLOAT_EQ(lp["top_logprobs"][i][tokenizer().decode({id})].get<float>(), fake_logprobs(id, int(i), 3).logprob);
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += tokenizer().decode({id});
  }
  EXPECT_EQ(joined, choice["text"]);
  // Without logprobs the field is null, and the backend was not asked for them.
  auto plain = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(plain);
  EXPECT_TRUE(json::parse(plain->body)["choices"][0]["logprobs"].is_null());
  const auto sent = backend_->submitted();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].options.logprobs, 3);
  EXPECT_EQ(sent[1].options.logprobs, -1);
}

TEST_F(ServerTest, ChatLogprobsHaveTokensBytesAndTopLogprobs) {
  start();
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto r = post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 4}, {"logprobs", true},
                                             {"top_logprobs", 2}, {"return_token_ids", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  const json& content = choice["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const int32_t id = choice["token_ids"][i];
    const std::string text = tokenizer().decode({id});
    EXPECT_EQ(content[i]["token"], text);
    EXPECT_FLOAT_EQ(content[i]["logprob"].get<float>(), fake_logprobs(id, int(i), 2).logprob);
    ASSERT_EQ(content[i]["bytes"].size(), text.size());
    for (size_t b = 0; b < text.size(); ++b) EXPECT_EQ(content[i]["bytes"][b], int((unsigned char)text[b]));
    ASSERT_EQ(content[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[i]["top_logprobs"][1]["token"], tokenizer().decode({id + 1}));
  }
  // logprobs: true alone gives the chosen tokens with empty top lists.
  auto bare = post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 2}, {"logprobs", true}});
  ASSERT_TRUE(bare);
  const json bare_content = json::parse(bare->body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(bare_content.size(), 2u);
  EXPECT_TRUE(bare_content[0]["top_logprobs"].empty());
}

TEST_F(ServerTest, StreamedLogprobsCoverEveryTokenOnce) {
  FakeBackendOptions fo;
  fo.tokens_per_event = 3;  // several tokens per event, as a speculative round delivers them
  start(fo);
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 10}, {"logprobs", 1}, {"stream", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Sse s = parse_sse(r->body);
  ASSERT_TRUE(s.done);
  std::vector<float> values;
  std::string tokens, text;
  size_t last_offset = 0;
  for (const json& e : s.events) {
    if (e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    text += c["text"].get<std::string>();
    if (c["logprobs"].is_null()) continue;
    for (size_t i = 0; i < c["logprobs"]["tokens"].size(); ++i) {
      values.push_back(c["logprobs"]["token_logprobs"][i]);
      tokens += c["logprobs"]["tokens"][i].get<std::string>();
      EXPECT_GE(c["logprobs"]["text_offset"][i].get<size_t>(), last_offset);
      last_offset = c["logprobs"]["text_offset"][i];
    }
  }
  ASSERT_EQ(values.size(), 10u);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_FLOAT_EQ(values[i], -0.5f * float(i % 4) - 0.125f);
  EXPECT_EQ(tokens, text);
}

TEST_F(ServerTest, LogitBiasMinTokensIgnoreEosAndPenaltiesReachTheBackend) {
  start();
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 8}, {"min_tokens", 3},
                                        {"logit_bias", {{"5", -100}, {"17", 2.5}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto ignoring = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 4}, {"ignore_eos", true},
                                               {"presence_penalty", 0.5}, {"frequency_penalty", -1.25},
                                               {"repetition_penalty", 1.3}});
  ASSERT_TRUE(ignoring);
  ASSERT_EQ(ignoring->status, 200) << ignoring->body;
  const auto sent = backend_->submitted();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].options.min_tokens, 3);
  std::vector<std::pair<int32_t, float>> got = sent[0].options.logit_bias;
  std::sort(got.begin(), got.end());
  const std::vector<std::pair<int32_t, float>> bias = {{5, -100.0f}, {17, 2.5f}};
  EXPECT_EQ(got, bias);
  EXPECT_FALSE(sent[0].options.stop_ids.empty());  // the model's end-of-turn ids
  EXPECT_TRUE(sent[1].options.stop_ids.empty());   // ignore_eos
  EXPECT_EQ(sent[0].options.presence_penalty, 0.0f);
  EXPECT_EQ(sent[0].options.repetition_penalty, 1.0f);
  EXPECT_EQ(sent[1].options.presence_penalty, 0.5f);
  EXPECT_EQ(sent[1].options.frequency_penalty, -1.25f);
  EXPECT_EQ(sent[1].options.repetition_penalty, 1.3f);
}

}  // namespace
}  // namespace ts::server::testing
