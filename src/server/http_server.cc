#include "server/http_server.h"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/completion.h"

namespace ts::server {

using nlohmann::json;

namespace {

// A seed for a request that gave none: each thread's own generator, seeded once from the system's entropy.
uint64_t fresh_seed() {
  thread_local std::mt19937_64 generator{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
  return generator() >> 1;  // within a JSON integer's non-negative range, as a client's seed would be
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// Counts a completion request in flight for the guard's lifetime.
struct InFlight {
  explicit InFlight(std::atomic<int>& counter) : counter(counter) { counter.fetch_add(1); }
  ~InFlight() { counter.fetch_sub(1); }
  std::atomic<int>& counter;
};

bool bearer_matches(const std::string& header, const std::string& key) {
  const std::string prefix = "Bearer ";
  if (header.size() != prefix.size() + key.size() || header.compare(0, prefix.size(), prefix) != 0) return false;
  unsigned char diff = 0;  // constant time in the key's length
  for (size_t i = 0; i < key.size(); ++i) diff |= (unsigned char)(header[prefix.size() + i] ^ key[i]);
  return diff == 0;
}

HttpLimits transport_limits(const ServerOptions& o) {
  TS_CHECK(o.max_batch >= 1, "max_batch must be >= 1");
  TS_CHECK(o.max_queue >= 0, "max_queue must be >= 0");
  HttpLimits limits = o.limits;
  limits.workers = o.max_batch + o.max_queue + std::max(1, o.spare_workers);
  return limits;
}

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)),
      transport_(transport_limits(options_),
                 TransportHooks{
                     [this](const HttpRequest& req) { return route(req); },
                     [this](int status, const std::string& message, const std::string& code) {
                       return error(status, message, status >= 500 ? "server_error" : "invalid_request_error", code);
                     },
                     [this](const std::string& method, const std::string& path, const std::string& remote,
                            int status) {
                       if (status >= 400) metrics_.rejected(status);
                       if (options_.access_log)
                         std::fprintf(stderr, "%s %s %s -> %d\n", method.empty() ? "-" : method.c_str(),
                                      path.empty() ? "-" : path.c_str(), remote.c_str(), status);
                     }}) {
  std::signal(SIGPIPE, SIG_IGN);  // every send passes MSG_NOSIGNAL; this covers any other write to a socket
}

HttpServer::~HttpServer() { stop(); }

std::string HttpServer::state_name() const {
  switch (state_.load()) {
    case State::Loading: return "loading";
    case State::Ready: return "ready";
    case State::Draining: return "draining";
  }
  return "?";
}

HttpResponse HttpServer::error(int status, const std::string& message, const std::string& type,
                               const std::string& code, const std::string& param) const {
  HttpResponse r;
  r.status = status;
  if (status == 429 || status == 503) r.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
  r.body = dump_json(error_json(message, type, code, param));
  return r;
}

HttpResponse HttpServer::health() const {
  switch (state_.load()) {
    case State::Ready: return HttpResponse{200, "application/json", {}, "{\"status\":\"ok\"}"};
    case State::Loading: return error(503, "the model is loading", "unavailable_error", "loading");
    case State::Draining: break;
  }
  return error(503, "the server is shutting down", "unavailable_error", "draining");
}

HttpResponse HttpServer::metrics_page() {
  EngineMetrics snapshot;
  Backend* backend = nullptr;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    backend = backend_;
    name = model_.name;
  }
  if (backend) snapshot = backend->metrics();
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", {},
                      metrics_.render(name, backend ? &snapshot : nullptr, state_name(), in_flight_.load(),
                                      transport_.open_connections())};
}

// Runs on the I/O thread: everything but completions is answered here, at once.
Route HttpServer::route(const HttpRequest& req) {
  Route r;
  const std::string& path = req.path;
  if (!options_.api_key.empty() && path.rfind("/v1/", 0) == 0) {
    const std::string auth = req.header("Authorization");
    if (auth.empty()) {
      r.response = error(401, "missing API key: send 'Authorization: Bearer <key>'", "invalid_request_error",
                         "missing_api_key");
      return r;
    }
    if (!bearer_matches(auth, options_.api_key)) {
      r.response = error(401, "incorrect API key", "invalid_request_error", "invalid_api_key");
      return r;
    }
  }
  const bool get = req.method == "GET", post = req.method == "POST";
  const bool loading = state_.load() == State::Loading;
  const std::string models = "/v1/models";
  if (get && path == "/health") {
    r.response = health();
  } else if (get && path == "/metrics") {
    r.response = metrics_page();
  } else if (get && (path == models || path.rfind(models + "/", 0) == 0) && path.size() != models.size() + 1) {
    if (loading) {
      r.response = error(503, "the model is loading", "unavailable_error", "loading");
      return r;
    }
    const json model = {{"id", model_.name}, {"object", "model"}, {"created", (long long)std::time(nullptr)},
                        {"owned_by", "treespark"}, {"max_model_len", model_.max_context}};
    if (path == models) {
      r.response.body = dump_json({{"object", "list"}, {"data", json::array({model})}});
    } else if (const std::string id = path.substr(models.size() + 1); id == model_.name) {
      r.response.body = dump_json(model);  // OpenAI's retrieve-model call
    } else {
      r.response = error(404, "the model '" + id + "' does not exist; this server serves '" + model_.name + "'",
                         "invalid_request_error", "model_not_found");
    }
  } else if (post && (path == "/v1/completions" || path == "/v1/chat/completions")) {
    const bool chat = path == "/v1/chat/completions";
    r.worker = [this, chat](const HttpRequest& request, ResponseWriter& out) { handle_completion(request, out, chat); };
  } else {
    r.response = error(404, "no such endpoint: " + req.method + " " + path.substr(0, 256), "invalid_request_error",
                       "not_found");
  }
  return r;
}

void HttpServer::handle_completion(const HttpRequest& req, ResponseWriter& out, bool chat) {
  try {
    const State state = state_.load();
    if (state == State::Loading) return void(out.send(error(503, "the model is loading", "unavailable_error", "loading")));
    if (state == State::Draining)
      return void(out.send(error(503, "the server is shutting down", "unavailable_error", "draining")));
    CompletionRequest request = parse_completion_request(req.body, chat, model_.request_defaults, model_.sampling);
    // Without a seed every request samples afresh, as OpenAI's and vLLM's do (a fixed default made every unseeded
    // T > 0 request return the same text: regenerate, best-of-n and pass@k broke). The seed used is returned.
    if (!request.seed_given) request.options.sampling.seed = fresh_seed();
    Request engine_request = prepare_request(request, model_);
    const int prompt_tokens = int(engine_request.prompt.size());

    InFlight in_flight(in_flight_);
    if (in_flight_.load() > options_.max_batch + options_.max_queue)
      return void(out.send(error(429, "the request queue is full; retry later", "rate_limit_error", "queue_full")));

    auto completion = std::make_shared<Completion>(request, model_, prompt_tokens, metrics_);
    const SubmitResult submitted = backend_->submit(
        std::move(engine_request), [completion](const RequestEvent& e) { completion->channel().push(e); });
    switch (submitted.reason) {
      case RejectReason::None: break;
      case RejectReason::QueueFull:
        return void(out.send(error(429, "the request queue is full; retry later" +
                                             (submitted.message.empty() ? "" : " (" + submitted.message + ")"),
                                   "rate_limit_error", "queue_full")));
      case RejectReason::Draining:
        return void(out.send(error(503, "the server is shutting down", "unavailable_error", "draining")));
      case RejectReason::BadParams:
      case RejectReason::OverContext:
        return void(out.send(error(400, submitted.message, "invalid_request_error", "invalid_request")));
    }
    completion->set_backend(backend_, submitted.id);
    metrics_.request_started(prompt_tokens);
    {
      std::lock_guard<std::mutex> lock(running_mutex_);
      running_ids_.insert(submitted.id);
    }
    if (request.stream)
      stream_completion(out, *completion);
    else
      answer_completion(out, *completion);
    std::lock_guard<std::mutex> lock(running_mutex_);
    running_ids_.erase(submitted.id);
  } catch (const ApiError& e) {
    HttpResponse r = error(e.status, "", "", "");
    r.body = dump_json(error_json(e));
    out.send(r);
  } catch (const std::exception& e) {
    out.send(error(500, std::string("internal error: ") + e.what(), "server_error", "internal_error"));
  }
}

void HttpServer::stream_completion(ResponseWriter& out, Completion& completion) {
  const auto heartbeat = std::chrono::milliseconds(options_.heartbeat_ms);
  auto last_write = std::chrono::steady_clock::now();
  auto write = [&](const std::string& s) {
    last_write = std::chrono::steady_clock::now();
    if (out.write_chunk(s)) return true;
    completion.abandon();  // the client is gone: free its slot and KV (a no-op once finished)
    return false;
  };
  if (!out.begin_chunked(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}))
    return completion.abandon();
  if (completion.request().chat && !write(sse(completion.first_chunk()))) return;
  while (!completion.finished()) {
    const std::string text = completion.step(heartbeat);
    if (!text.empty() && !write(sse(completion.text_chunk(text)))) return;
    // Nothing to send for a while: a comment line, so a client that went away is noticed.
    if (!completion.finished() && std::chrono::steady_clock::now() - last_write >= heartbeat &&
        !write(": keep-alive\n\n"))
      return;
  }
  if (completion.failed()) {
    if (!write(sse(error_json(completion.error(), "server_error", "generation_failed")))) return;
  } else {
    if (!write(sse(completion.final_chunk()))) return;
    if (completion.request().include_usage && !write(sse(completion.usage_chunk()))) return;
  }
  if (write("data: [DONE]\n\n")) out.end_chunked();
}

// Nothing is written until the answer is ready, so a client that leaves is seen by checking its socket every
// heartbeat. One that sent end-of-stream has either closed or only stopped sending (shutdown(SHUT_WR), as
// `nc -N` and some proxies do); only a write tells which, so its 200 starts at once as a chunked body and a
// space (JSON allows leading whitespace) goes out every heartbeat: a closed client resets the second one.
void HttpServer::answer_completion(ResponseWriter& out, Completion& completion) {
  const auto heartbeat = std::chrono::milliseconds(options_.heartbeat_ms);
  while (!completion.finished()) {
    completion.step(heartbeat);
    if (completion.finished()) break;
    const PeerState peer = out.peer_state();
    if (peer == PeerState::Gone) return completion.abandon();
    if (peer == PeerState::HalfClosed) {
      if (!out.started() && !out.begin_chunked(200, "application/json", {})) return completion.abandon();
      if (!out.write_chunk(" ")) return completion.abandon();
    }
  }
  if (out.started()) {  // the status went out already: a failure can only be told in the body
    const json body = completion.failed() ? error_json(completion.error(), "server_error", "generation_failed")
                                          : completion.response();
    if (out.write_chunk(dump_json(body))) out.end_chunked();
    return;
  }
  if (completion.failed())
    return void(out.send(error(500, completion.error(), "server_error", "generation_failed")));
  out.send(HttpResponse{200, "application/json", {}, dump_json(completion.response())});
}

int HttpServer::bind() {
  port_ = transport_.bind(options_.host, options_.port);
  return port_;
}

void HttpServer::start() {
  TS_CHECK(port_ > 0, "HttpServer::start before bind");
  transport_.start();
}

void HttpServer::set_ready(Backend& backend, ServedModel model) {
  TS_CHECK(model.tokenizer, "the server needs a tokenizer");
  {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    backend_ = &backend;
    model_ = std::move(model);
  }
  state_.store(State::Ready);
}

void HttpServer::begin_drain() {
  state_.store(State::Draining);
  transport_.drain();
}

bool HttpServer::wait_idle(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (in_flight_.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::cancel_running() {
  std::set<RequestId> ids;
  {
    std::lock_guard<std::mutex> lock(running_mutex_);
    ids = running_ids_;
  }
  for (RequestId id : ids) backend_->cancel(id);
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  transport_.stop();
}

}  // namespace ts::server
