// The OpenAI-compatible HTTP front end over a Backend:
//   POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming), GET /v1/models, GET /v1/models/{id},
//   GET /health, GET /metrics (Prometheus text, vLLM names).
// The transport (http_transport.h) holds connections on one event-driven I/O thread with every client-controlled
// size and time bounded; health, metrics, models and every error are answered there, so they stay fast while
// generation is saturated; completions run on a fixed pool of workers (max_batch + max_queue + spare), and at
// most max_batch + max_queue are in flight (past that 429 with Retry-After). A client that goes away is noticed
// within one heartbeat (streaming: an SSE comment every heartbeat_ms; otherwise its socket is checked as often)
// and its backend request is cancelled. Lifecycle: loading (/health 503) -> ready -> draining (new requests 503,
// idle connections closed, running ones finish or are cancelled at the drain deadline) -> stopped.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "server/backend.h"
#include "server/http_transport.h"
#include "server/prometheus.h"
#include "server/openai_request.h"

namespace ts::server {

class Completion;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (bind() returns it)
  std::string api_key;               // "" = no authentication
  int max_batch = 8;                 // requests the backend runs at once (sizes the worker pool)
  int max_queue = 64;                // requests allowed to wait beyond max_batch
  int spare_workers = 8;             // workers beyond max_batch + max_queue (requests refused with 429 use them)
  int heartbeat_ms = 250;            // SSE comment interval while no token arrives; socket check interval
  int retry_after_s = 1;             // Retry-After on 429 / 503
  bool access_log = false;           // one line per response on stderr
  HttpLimits limits;                 // connections, header, body, timeouts (workers is set from the above)
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();    // binds host:port; returns the port (throws ts::Error if it cannot bind)
  void start();  // serves on background threads (after bind)
  // The model is loaded: completions are served from now on, /health answers 200. `backend` must outlive stop().
  void set_ready(Backend& backend, ServedModel model);
  void begin_drain();                 // new completion requests 503, /health 503, idle connections closed
  bool wait_idle(double timeout_s);   // true once no completion request is in flight
  void cancel_running();              // cancels every backend request in flight (their responses then end)
  void stop();                        // closes every connection and joins the threads (idempotent)

  int port() const { return port_; }
  int in_flight() const { return in_flight_.load(); }
  int open_connections() const { return transport_.open_connections(); }
  std::string state_name() const;

 private:
  enum class State { Loading, Ready, Draining };
  Route route(const HttpRequest& req);
  HttpResponse error(int status, const std::string& message, const std::string& type, const std::string& code,
                     const std::string& param = "") const;
  HttpResponse health() const;
  HttpResponse metrics_page();
  void handle_completion(const HttpRequest& req, ResponseWriter& out, bool chat);
  void stream_completion(ResponseWriter& out, Completion& completion);
  void answer_completion(ResponseWriter& out, Completion& completion);

  ServerOptions options_;
  HttpTransport transport_;
  int port_ = -1;
  std::atomic<State> state_{State::Loading};
  std::mutex ready_mutex_;
  Backend* backend_ = nullptr;
  ServedModel model_;
  ServerMetrics metrics_;
  std::atomic<int> in_flight_{0};
  std::mutex running_mutex_;
  std::set<RequestId> running_ids_;  // backend ids of requests in flight, guarded by running_mutex_
  bool stopped_ = false;
};

}  // namespace ts::server
