// A live HttpServer on a free loopback port over a FakeBackend, with the shipped model's tokenizer and chat
// template, and small HTTP helpers (httplib::Client) for the tests.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/fake_backend.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ts::server::testing {

// A raw loopback connection that has sent `POST path` with this JSON body (for tests that must close the socket
// themselves). Returns the socket, or -1.
inline int send_raw_post(int port, const std::string& path, const std::string& body) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ::close(fd), -1;
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd, req.data(), req.size(), 0) != ssize_t(req.size())) return ::close(fd), -1;
  return fd;
}

// Polls `done` every 5 ms until it holds or limit_s passes; returns the seconds waited.
template <typename Done>
double wait_until(Done done, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while (!done() && waited() < limit_s) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return waited();
}

inline std::string shipped_target_dir() { return std::string(TS_SOURCE_DIR) + "/models/treespark-target"; }

// Tokenizer and template load once per test binary.
struct SharedTokenizer {
  tok::Tokenizer tokenizer;
  tok::ChatTemplate chat;
  static const SharedTokenizer& get() {
    static SharedTokenizer s{tok::Tokenizer::from_file(shipped_target_dir() + "/tokenizer.json"),
                             tok::ChatTemplate::from_model_dir(shipped_target_dir())};
    return s;
  }
};

struct Sse {
  std::vector<nlohmann::json> events;  // parsed `data: {...}` payloads, in order
  bool done = false;                   // a final `data: [DONE]` came last
  int comments = 0;                    // `: ...` heartbeat lines
  std::string raw;
};

inline Sse parse_sse(const std::string& body) {
  Sse s;
  s.raw = body;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    if (block.empty()) continue;
    if (block[0] == ':') {
      ++s.comments;
      continue;
    }
    EXPECT_EQ(block.rfind("data: ", 0), 0u) << "not an SSE data line: " << block;
    EXPECT_FALSE(s.done) << "data after [DONE]";
    const std::string payload = block.substr(6);
    if (payload == "[DONE]") {
      s.done = true;
      continue;
    }
    s.events.push_back(nlohmann::json::parse(payload));
  }
  return s;
}

class ServerTest : public ::testing::Test {
 protected:
  // Starts the server; call from the test (options differ per test).
  void start(FakeBackendOptions backend_options = {}, ServerOptions server_options = {}) {
    const SharedTokenizer& t = SharedTokenizer::get();
    if (backend_options.script.empty() && !backend_options.script_for)
      backend_options.script = t.tokenizer.encode("Hello world, this is the fake backend speaking.");
    backend_ = std::make_unique<FakeBackend>(backend_options);
    server_options.port = 0;
    server_ = std::make_unique<HttpServer>(server_options);
    port_ = server_->bind();
    server_->start();
    ready();
  }
  void start_loading(ServerOptions server_options = {}) {  // listening, model not ready yet
    server_options.port = 0;
    server_ = std::make_unique<HttpServer>(server_options);
    port_ = server_->bind();
    server_->start();
  }
  void ready(FakeBackendOptions backend_options = {}) {
    const SharedTokenizer& t = SharedTokenizer::get();
    if (!backend_) {
      if (backend_options.script.empty()) backend_options.script = t.tokenizer.encode("Hello world.");
      backend_ = std::make_unique<FakeBackend>(backend_options);
    }
    ServedModel m;
    m.name = "treespark-test";
    m.tokenizer = &t.tokenizer;
    m.chat_template = &t.chat;
    m.stop_ids = t.chat.stop_ids(t.tokenizer);
    m.max_context = 256;
    m.vocab_size = t.tokenizer.vocab_size();
    m.sampling = sampling_defaults_;
    server_->set_ready(*backend_, m);
  }
  SamplingDefaults sampling_defaults_;  // the served model's (ready() passes them on)
  void TearDown() override {
    if (server_) server_->stop();
    server_.reset();
    backend_.reset();
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& headers = {}) const {
    return client().Post(path.c_str(), headers, body, "application/json");
  }
  httplib::Result post(const std::string& path, const nlohmann::json& body, const httplib::Headers& headers = {}) const {
    return post(path, body.dump(), headers);
  }
  httplib::Result get(const std::string& path, const httplib::Headers& headers = {}) const {
    return client().Get(path.c_str(), headers);
  }
  const tok::Tokenizer& tokenizer() const { return SharedTokenizer::get().tokenizer; }

  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

// The value of a Prometheus sample line `name{labels} value` whose name-and-labels start with `prefix`.
inline double metric_value(const std::string& page, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = page.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || page[pos - 1] == '\n') {
      const size_t eol = page.find('\n', pos);
      const std::string line = page.substr(pos, eol - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += prefix.size();
  }
  ADD_FAILURE() << "no metric " << prefix;
  return -1;
}

}  // namespace ts::server::testing
