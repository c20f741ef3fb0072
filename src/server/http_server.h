// The OpenAI-compatible HTTP front end (cpp-httplib) over a Backend:
//   POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming), GET /v1/models, GET /health,
//   GET /metrics (Prometheus text, vLLM names).
// Bounded everywhere: a fixed pool of HTTP workers (max_batch + max_queue + spare), a bounded queue of accepted
// connections waiting for a worker (past it a connection gets 503 at once), a bounded body (413), and at most
// max_batch + max_queue completion requests in flight (past that 429 with Retry-After). A streaming client that
// disconnects is noticed within one heartbeat (an SSE comment every heartbeat_ms; httplib sees a disconnect only
// when a write fails) and its backend request is cancelled. Lifecycle: loading (/health 503) -> ready ->
// draining (new requests 503, running ones finish) -> stopped.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/backend.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace ts::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (bind() returns it)
  std::string api_key;               // "" = no authentication
  int max_batch = 8;                 // requests the backend runs at once (sizes the worker pool)
  int max_queue = 64;                // requests allowed to wait beyond max_batch
  int spare_workers = 8;             // HTTP workers beyond max_batch + max_queue (health, metrics, rejections)
  size_t max_body_bytes = 4 << 20;   // larger bodies get 413
  int heartbeat_ms = 250;            // SSE comment interval while no token arrives
  int retry_after_s = 1;             // Retry-After on 429 / 503
  int read_timeout_s = 10;           // a client that sends nothing for this long is dropped
  int keep_alive_timeout_s = 5;
  bool access_log = false;           // one line per response on stderr
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();    // binds host:port; returns the port (throws ts::Error if it cannot bind)
  void start();  // serves on a background thread (after bind)
  // The model is loaded: completions are served from now on, /health answers 200. `backend` must outlive stop().
  void set_ready(Backend& backend, ServedModel model);
  void begin_drain();                 // new completion requests 503, /health 503
  bool wait_idle(double timeout_s);   // true once no completion request is in flight
  void stop();                        // stops listening and joins the workers (idempotent)

  int port() const { return port_; }
  int in_flight() const { return in_flight_.load(); }
  std::string state_name() const;

 private:
  enum class State { Loading, Ready, Draining };
  void install_routes();
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void stream_completion(httplib::Response& res, std::shared_ptr<class Completion> completion);
  void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                  const std::string& code, const std::string& param = "");

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  int port_ = -1;
  std::atomic<State> state_{State::Loading};
  std::mutex ready_mutex_;
  Backend* backend_ = nullptr;
  ServedModel model_;
  ServerMetrics metrics_;
  std::atomic<int> in_flight_{0};
  bool stopped_ = false;
};

}  // namespace ts::server
