// Bad input and faults over real HTTP: a table of bad requests (status + OpenAI error JSON), authentication,
// oversized bodies, a full queue, a failing request beside healthy ones, and a client that disconnects
// mid-stream.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "server/server_fixture.h"

namespace ts::server::testing {
namespace {

using nlohmann::json;

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* code;   // the error's code
  const char* param;  // the error's param ("" = null)
};

const std::string kUser = R"("messages": [{"role": "user", "content": "hi"}])";

std::vector<BadCase> bad_cases() {
  const char* C = "/v1/completions";
  const char* H = "/v1/chat/completions";
  return {
      {"not_json", C, "{\"prompt\": ", 400, "invalid_json", ""},
      {"empty_body", C, "", 400, "invalid_json", ""},
      {"json_array_body", C, "[1, 2]", 400, "invalid_json", ""},
      {"invalid_utf8", C, "{\"prompt\": \"\xff\xfe\"}", 400, "invalid_json", ""},
      {"missing_prompt", C, "{\"max_tokens\": 3}", 400, "missing_field", "prompt"},
      {"prompt_number", C, "{\"prompt\": 5}", 400, "invalid_type", "prompt"},
      {"prompt_empty", C, "{\"prompt\": \"\"}", 400, "invalid_value", "prompt"},
      {"prompt_batch", C, "{\"prompt\": [\"a\", \"b\"]}", 400, "unsupported_parameter", "prompt"},
      {"prompt_id_out_of_vocab", C, "{\"prompt\": [1, 999999]}", 400, "invalid_value", "prompt"},
      {"prompt_negative_id", C, "{\"prompt\": [-3]}", 400, "invalid_value", "prompt"},
      {"prompt_mixed_types", C, "{\"prompt\": [1, true]}", 400, "invalid_type", "prompt"},
      {"missing_messages", H, "{\"max_tokens\": 3}", 400, "missing_field", "messages"},
      {"messages_not_array", H, "{\"messages\": \"hi\"}", 400, "invalid_type", "messages"},
      {"messages_empty", H, "{\"messages\": []}", 400, "invalid_value", "messages"},
      {"message_not_object", H, "{\"messages\": [\"hi\"]}", 400, "invalid_type", "messages[0]"},
      {"message_missing_role", H, "{\"messages\": [{\"content\": \"hi\"}]}", 400, "missing_field", "messages[0].role"},
      {"unknown_role", H, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}", 400, "invalid_role",
       "messages[0].role"},
      {"role_not_string", H, "{\"messages\": [{\"role\": 1, \"content\": \"hi\"}]}", 400, "invalid_type",
       "messages[0].role"},
      {"content_number", H, "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", 400, "invalid_type",
       "messages[0].content"},
      {"content_missing_user", H, "{\"messages\": [{\"role\": \"user\"}]}", 400, "missing_field",
       "messages[0].content"},
      {"content_image_part", H,
       "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}", 400,
       "unsupported_parameter", "messages[0].content[0].type"},
      {"max_tokens_zero", C, "{\"prompt\": \"a\", \"max_tokens\": 0}", 400, "invalid_value", "max_tokens"},
      {"max_tokens_negative", C, "{\"prompt\": \"a\", \"max_tokens\": -5}", 400, "invalid_value", "max_tokens"},
      {"max_tokens_string", C, "{\"prompt\": \"a\", \"max_tokens\": \"10\"}", 400, "invalid_type", "max_tokens"},
      {"max_tokens_fraction", C, "{\"prompt\": \"a\", \"max_tokens\": 1.5}", 400, "invalid_type", "max_tokens"},
      {"max_completion_tokens_zero", H, "{" + kUser + ", \"max_completion_tokens\": 0}", 400, "invalid_value",
       "max_completion_tokens"},
      {"temperature_negative", C, "{\"prompt\": \"a\", \"temperature\": -0.1}", 400, "invalid_value", "temperature"},
      {"temperature_too_high", C, "{\"prompt\": \"a\", \"temperature\": 2.5}", 400, "invalid_value", "temperature"},
      {"temperature_string", C, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", 400, "invalid_type", "temperature"},
      {"top_p_zero", C, "{\"prompt\": \"a\", \"top_p\": 0}", 400, "invalid_value", "top_p"},
      {"top_p_above_one", C, "{\"prompt\": \"a\", \"top_p\": 1.2}", 400, "invalid_value", "top_p"},
      {"top_k_negative", C, "{\"prompt\": \"a\", \"top_k\": -7}", 400, "invalid_value", "top_k"},
      {"top_k_float", C, "{\"prompt\": \"a\", \"top_k\": 2.5}", 400, "invalid_type", "top_k"},
      {"min_p_above_one", C, "{\"prompt\": \"a\", \"min_p\": 1.5}", 400, "invalid_value", "min_p"},
      {"seed_negative", C, "{\"prompt\": \"a\", \"seed\": -1}", 400, "invalid_value", "seed"},
      {"seed_string", C, "{\"prompt\": \"a\", \"seed\": \"x\"}", 400, "invalid_type", "seed"},
      {"n_two", C, "{\"prompt\": \"a\", \"n\": 2}", 400, "unsupported_parameter", "n"},
      {"best_of_three", C, "{\"prompt\": \"a\", \"best_of\": 3}", 400, "unsupported_parameter", "best_of"},
      {"echo_true", C, "{\"prompt\": \"a\", \"echo\": true}", 400, "unsupported_parameter", "echo"},
      {"logprobs_over_20", C, "{\"prompt\": \"a\", \"logprobs\": 21}", 400, "invalid_value", "logprobs"},
      {"logit_bias_key", C, "{\"prompt\": \"a\", \"logit_bias\": {\"abc\": 1}}", 400, "invalid_value", "logit_bias"},
      {"logit_bias_range", C, "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 101}}", 400, "invalid_value",
       "logit_bias.5"},
      {"logit_bias_vocab", C, "{\"prompt\": \"a\", \"logit_bias\": {\"999999\": 1}}", 400, "invalid_value",
       "logit_bias"},
      {"logit_bias_array", C, "{\"prompt\": \"a\", \"logit_bias\": [1]}", 400, "invalid_type", "logit_bias"},
      {"top_logprobs_without_logprobs", H, "{" + kUser + ", \"top_logprobs\": 3}", 400, "invalid_value",
       "top_logprobs"},
      {"top_logprobs_over_20", H, "{" + kUser + ", \"logprobs\": true, \"top_logprobs\": 21}", 400, "invalid_value",
       "top_logprobs"},
      {"ignore_eos_string", C, "{\"prompt\": \"a\", \"ignore_eos\": \"yes\"}", 400, "invalid_type", "ignore_eos"},
      {"min_tokens_negative", C, "{\"prompt\": \"a\", \"min_tokens\": -1}", 400, "invalid_value", "min_tokens"},
      {"min_tokens_over_max", C, "{\"prompt\": \"a\", \"max_tokens\": 4, \"min_tokens\": 5}", 400, "invalid_value",
       "min_tokens"},
      {"repetition_penalty_zero", C, "{\"prompt\": \"a\", \"repetition_penalty\": 0}", 400, "invalid_value",
       "repetition_penalty"},
      {"reasoning_effort", H, "{" + kUser + ", \"reasoning_effort\": \"low\"}", 400, "unsupported_parameter",
       "reasoning_effort"},
      {"modalities_audio", H, "{" + kUser + ", \"modalities\": [\"text\", \"audio\"]}", 400,
       "unsupported_parameter", "modalities"},
      {"tool_choice_required", H, "{" + kUser + ", \"tool_choice\": \"required\"}", 400, "unsupported_parameter",
       "tool_choice"},
      {"nested_past_the_limit", C, "{\"prompt\": \"a\", \"x\": " + std::string(kMaxJsonDepth, '[') +
       std::string(kMaxJsonDepth, ']') + "}", 400, "invalid_json", ""},
      {"tools", H, "{" + kUser + ", \"tools\": [{\"type\": \"function\"}]}", 400, "unsupported_parameter", "tools"},
      {"presence_penalty_range", C, "{\"prompt\": \"a\", \"presence_penalty\": -2.5}", 400, "invalid_value",
       "presence_penalty"},
      {"frequency_penalty_range", C, "{\"prompt\": \"a\", \"frequency_penalty\": 3}", 400, "invalid_value",
       "frequency_penalty"},
      {"stop_number", C, "{\"prompt\": \"a\", \"stop\": 5}", 400, "invalid_type", "stop"},
      {"stop_empty_string", C, "{\"prompt\": \"a\", \"stop\": [\"\"]}", 400, "invalid_value", "stop"},
      {"stop_array_of_numbers", C, "{\"prompt\": \"a\", \"stop\": [1]}", 400, "invalid_type", "stop"},
      {"stream_string", C, "{\"prompt\": \"a\", \"stream\": \"yes\"}", 400, "invalid_type", "stream"},
      {"stream_options_without_stream", C, "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}", 400,
       "invalid_value", "stream_options"},
      {"include_usage_string", C,
       "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"include_usage\": \"y\"}}", 400, "invalid_type",
       "stream_options.include_usage"},
      {"response_format_json", H, "{" + kUser + ", \"response_format\": {\"type\": \"json_object\"}}", 400,
       "unsupported_parameter", "response_format"},
      {"model_not_string", C, "{\"prompt\": \"a\", \"model\": 7}", 400, "invalid_type", "model"},
      {"prompt_over_context", C, "{\"prompt\": [" + [] {
         std::string s;
         for (int i = 0; i < 300; ++i) s += (i ? ",5" : "5");
         return s;
       }() + "]}", 400, "context_length_exceeded", "prompt"},
      {"max_tokens_over_context", C, "{\"prompt\": \"a\", \"max_tokens\": 1000}", 400, "context_length_exceeded",
       "prompt"},
      {"unknown_model", C, "{\"prompt\": \"a\", \"model\": \"gpt-4\"}", 404, "model_not_found", "model"},
      {"unknown_path", "/v1/embeddings", "{}", 404, "not_found", ""},
  };
}

TEST_F(ServerTest, BadRequestTable) {
  start();
  const auto cases = bad_cases();
  ASSERT_GE(cases.size(), 30u);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = post(c.path, c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    ASSERT_TRUE(j.contains("error") && j["error"].is_object()) << r->body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["code"], c.code) << e["message"];
    if (*c.param) {
      EXPECT_EQ(e["param"], c.param);
    } else {
      EXPECT_TRUE(e["param"].is_null());
    }
  }
  EXPECT_TRUE(backend_->submitted().empty());  // nothing bad reached the backend
  // And the server still serves.
  auto ok = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  // Neutral values and harmless metadata are accepted; brackets inside strings do not count as nesting.
  const json accepted = {{"prompt", std::string(kMaxJsonDepth + 50, '[')},
                         {"max_tokens", 2},
                         {"logit_bias", json::object()},
                         {"ignore_eos", false},
                         {"min_tokens", 0},
                         {"repetition_penalty", 1},
                         {"service_tier", "auto"},
                         {"parallel_tool_calls", true},
                         {"prediction", {{"type", "content"}, {"content", "x"}}},
                         {"tool_choice", "none"},
                         {"modalities", {"text"}}};
  auto also = post("/v1/completions", accepted);
  ASSERT_TRUE(also);
  EXPECT_EQ(also->status, 200) << also->body;
}

// An out-of-range number is quoted as the client sent it, not as a clamped or wrapped copy; a 64-bit seed is fine.
TEST_F(ServerTest, ErrorsQuoteNumbersAsSent) {
  start();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt\": [5, 4294967301]}", "4294967301"},
      {"{\"prompt\": [5, -3]}", "-3"},
      {"{\"prompt\": \"a\", \"top_k\": 9999999999}", "9999999999"},
      {"{\"prompt\": \"a\", \"max_tokens\": 18446744073709551615}", "18446744073709551615"},
      {"{\"prompt\": \"a\", \"seed\": -5}", "-5"},
  };
  for (const auto& [body, number] : cases) {
    SCOPED_TRACE(body);
    auto r = post("/v1/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    const std::string message = json::parse(r->body)["error"]["message"];
    EXPECT_NE(message.find(number), std::string::npos) << message;
  }
  auto r = post("/v1/completions", std::string("{\"prompt\": \"a\", \"max_tokens\": 2, \"seed\": 18446744073709551615}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["seed"].template get<uint64_t>(), 18446744073709551615ull);
}

// A prompt nested 1,000,000 arrays deep (a 2 MB body, under the body cap) once overflowed a worker's stack through
// a recursive copy of the value and killed the process (issue 28 saw it at 70,000 levels): it is a 400 like any
// other wrong prompt.
TEST_F(ServerTest, DeeplyNestedPromptIsA400NotACrash) {
  start();
  constexpr int kDepth = 1000000;
  std::string body = "{\"prompt\": ";
  body.append(kDepth, '[');
  body += "1";
  body.append(kDepth, ']');
  body += "}";
  auto r = post("/v1/completions", body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body.substr(0, 200);
  EXPECT_TRUE(backend_->submitted().empty());
  auto ok = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// Unseeded requests sample afresh (a fixed default seed made every unseeded T > 0 request the same); a seed given
// is passed through.
TEST_F(ServerTest, UnseededRequestsGetFreshSeedsAndSeededOnesKeepTheirs) {
  start();
  std::vector<uint64_t> returned;  // the seed each response says it used
  for (int i = 0; i < 3; ++i) {
    auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}, {"temperature", 1}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    returned.push_back(json::parse(r->body)["seed"].get<uint64_t>());
  }
  auto seeded = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}, {"temperature", 1}, {"seed", 7}});
  ASSERT_TRUE(seeded);
  ASSERT_EQ(seeded->status, 200);
  EXPECT_EQ(json::parse(seeded->body)["seed"], 7);
  const std::vector<Request> got = backend_->submitted();
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[size_t(i)].options.sampling.seed, returned[size_t(i)]);  // replayable
  EXPECT_NE(got[0].options.sampling.seed, got[1].options.sampling.seed);
  EXPECT_NE(got[1].options.sampling.seed, got[2].options.sampling.seed);
  EXPECT_NE(got[0].options.sampling.seed, got[2].options.sampling.seed);
  EXPECT_EQ(got[3].options.sampling.seed, 7u);
}

TEST_F(ServerTest, OversizedBodyIs413) {
  ServerOptions so;
  so.limits.max_body_bytes = 1000;
  start({}, so);
  auto r = post("/v1/completions", "{\"prompt\": \"" + std::string(5000, 'a') + "\"}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["code"], "request_too_large");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
}

TEST_F(ServerTest, ApiKey) {
  ServerOptions so;
  so.api_key = "s3cret";
  start({}, so);
  const json body = {{"prompt", "a"}, {"max_tokens", 2}};
  auto none = post("/v1/completions", body);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["code"], "missing_api_key");
  auto wrong = post("/v1/completions", body, {{"Authorization", "Bearer s3crex"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(json::parse(wrong->body)["error"]["code"], "invalid_api_key");
  auto prefix = post("/v1/completions", body, {{"Authorization", "Bearer s3cret2"}});
  ASSERT_TRUE(prefix);
  EXPECT_EQ(prefix->status, 401);
  auto models = get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto good = post("/v1/completions", body, {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  // Health and metrics stay open for probes and scrapers.
  auto health = get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

// Opens a streaming request on a raw socket and returns the fd after the response headers arrived.
int open_stream(int port, const std::string& body) {
  const int fd = send_raw_post(port, "/v1/completions", body);
  char buf[512];
  if (fd < 0 || ::recv(fd, buf, sizeof buf, 0) <= 0) return -1;
  return fd;
}

TEST_F(ServerTest, QueueFullIs429WithRetryAfter) {
  FakeBackendOptions fo;
  fo.max_running = 1;
  fo.tick_ms = 20;
  ServerOptions so;
  so.max_batch = 1;
  so.max_queue = 1;
  start(fo, so);
  const std::string slow = json{{"prompt", "a"}, {"max_tokens", 100000 / 1000}, {"stream", true}}.dump();
  int a = open_stream(port_, slow), b = open_stream(port_, slow);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["code"], "queue_full");
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  ::close(a);
  ::close(b);
  // Both slots come back (disconnect -> cancel), and the next request is served.
  const auto t0 = std::chrono::steady_clock::now();
  while (server_->in_flight() > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

int connect_idle(int port) {  // a connection that never sends a request
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? fd : -1;
}

// Idle connections hold no worker: with one generation slot and more idle connections than workers, /health
// and a completion are still answered.
TEST_F(ServerTest, IdleConnectionsHoldNoWorker) {
  ServerOptions so;
  so.max_batch = 1;
  so.max_queue = 0;
  so.spare_workers = 1;  // 2 workers
  start({}, so);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(connect_idle(port_));
    ASSERT_GE(idle.back(), 0);
  }
  auto health = get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  for (int fd : idle) ::close(fd);
}

// Past --max-connections a new connection gets 503 "overloaded" at once and is closed; closing one lets the
// next in.
TEST_F(ServerTest, ConnectionsPastTheLimitGet503) {
  ServerOptions so;
  so.limits.max_connections = 4;
  start({}, so);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(connect_idle(port_));
    ASSERT_GE(idle.back(), 0);
  }
  ASSERT_GT(wait_until([&] { return server_->open_connections() == 4; }, 2), -1);
  auto r = get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "overloaded");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  ::close(idle.back());
  idle.pop_back();
  wait_until([&] { return server_->open_connections() < 4; }, 2);
  auto ok = get("/health");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  for (int fd : idle) ::close(fd);
}

TEST_F(ServerTest, ClientDisconnectFreesTheSlotWithinOneSecond) {
  FakeBackendOptions fo;
  fo.tick_ms = 400;  // slower than the heartbeat: the disconnect is seen through SSE comments, not tokens
  start(fo);
  int fd = open_stream(port_, json{{"prompt", "a"}, {"max_tokens", 200}, {"stream", true}}.dump());
  ASSERT_GE(fd, 0);
  wait_until([&] { return backend_->metrics().num_requests_running > 0; }, 3);  // it runs in the backend
  ASSERT_EQ(backend_->metrics().num_requests_running, 1);
  ::close(fd);
  const double freed_s = wait_until([&] { return backend_->metrics().num_requests_running == 0; }, 3);
  EXPECT_EQ(backend_->metrics().num_requests_running, 0);
  EXPECT_EQ(backend_->cancelled(), 1);
  EXPECT_LT(freed_s, 1.0) << "slot freed after " << freed_s << " s";
  std::printf("[disconnect] backend slot freed %.3f s after the client closed\n", freed_s);
  wait_until([&] { return server_->in_flight() == 0; }, 2);
  EXPECT_EQ(server_->in_flight(), 0);
  auto m = get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric_value(m->body, "vllm:request_success_total{model_name=\"treespark-test\",finished_reason=\"abort\""), 1);
}

// A non-streaming request writes nothing until its answer is ready: its client leaving is seen by watching the
// socket, and frees the slot within one second too.
TEST_F(ServerTest, NonStreamingClientDisconnectFreesTheSlotWithinOneSecond) {
  FakeBackendOptions fo;
  fo.tick_ms = 50;
  start(fo);
  // 200 ticks = 10 s of work
  const int fd = send_raw_post(port_, "/v1/completions", json{{"prompt", "a"}, {"max_tokens", 200}}.dump());
  ASSERT_GE(fd, 0);
  wait_until([&] { return backend_->metrics().num_requests_running > 0; }, 3);
  ASSERT_EQ(backend_->metrics().num_requests_running, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the first check: the watch has its socket
  ASSERT_EQ(backend_->metrics().num_requests_running, 1) << "an open client's request must keep running";
  ::close(fd);
  const double freed_s = wait_until([&] { return backend_->metrics().num_requests_running == 0; }, 5);
  EXPECT_EQ(backend_->metrics().num_requests_running, 0);
  EXPECT_EQ(backend_->cancelled(), 1);
  EXPECT_LT(freed_s, 1.0) << "slot freed after " << freed_s << " s";
  std::printf("[non-streaming disconnect] backend slot freed %.3f s after the client closed\n", freed_s);
  // A client that stays gets its whole answer (the watch does not mistake an open connection for a closed one).
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 12}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 12);
}

TEST_F(ServerTest, AFailingRequestDoesNotHurtTheOthers) {
  FakeBackendOptions fo;
  fo.fail_id = 4000;
  fo.max_running = 4;
  start(fo);
  std::vector<std::thread> threads;
  std::vector<int> status(6, 0);
  std::vector<std::string> bodies(6);
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] {
      json prompt = i == 2 ? json{1, 4000} : json{1, 2};
      auto r = post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 10}, {"stream", i == 4}});
      if (r) status[i] = r->status, bodies[i] = r->body;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(status[2], 500);
  json e = json::parse(bodies[2]);
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(e["error"]["code"], "generation_failed");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("injected fault"), std::string::npos);
  for (int i : {0, 1, 3, 5}) {
    EXPECT_EQ(status[i], 200) << i;
    EXPECT_EQ(json::parse(bodies[i])["usage"]["completion_tokens"], 10);
  }
  Sse s = parse_sse(bodies[4]);
  EXPECT_TRUE(s.done);
  // A streamed failure ends with an error event and [DONE].
  auto r = post("/v1/completions", json{{"prompt", {4000}}, {"max_tokens", 10}, {"stream", true}});
  ASSERT_TRUE(r);
  Sse f = parse_sse(r->body);
  EXPECT_TRUE(f.done);
  ASSERT_FALSE(f.events.empty());
  EXPECT_EQ(f.events.back()["error"]["code"], "generation_failed");
}

TEST_F(ServerTest, DrainingRefusesNewRequestsAndFinishesRunningOnes) {
  FakeBackendOptions fo;
  fo.tick_ms = 20;
  start(fo);
  std::thread running([&] {
    auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 20}, {"stream", true}});
    ASSERT_TRUE(r);
    Sse s = parse_sse(r->body);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.events.back()["usage"]["completion_tokens"], 20);
  });
  while (server_->in_flight() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  server_->begin_drain();
  auto r = post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "draining");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  auto h = get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_TRUE(server_->wait_idle(10));
  running.join();
}

}  // namespace
}  // namespace ts::server::testing
