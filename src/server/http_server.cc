#include "server/http_server.h"

#include <httplib.h>

#include <condition_variable>
#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <random>

#include "core/error.h"
#include "server/api_error.h"
#include "server/completion.h"
#include "server/connection_watch.h"

namespace ts::server {

using nlohmann::json;

namespace {

// A seed for a request that gave none: each thread's own generator, seeded once from the system's entropy.
uint64_t fresh_seed() {
  thread_local std::mt19937_64 generator{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
  return generator() >> 1;  // within a JSON integer's non-negative range, as a client's seed would be
}

// Set on the threads that answer connections the worker queue had no room for: the pre-routing handler answers
// them 503 at once, without reading a body.
thread_local bool t_overflow = false;

// A fixed set of workers over a bounded queue of accepted connections (httplib's own ThreadPool queues without
// bound). A connection that finds that queue full goes to two rejector threads that answer 503 "overloaded"
// (their queue is bounded too); only past both bounds does the accept thread itself answer, so slow or idle
// clients cannot stall accepting unless they fill every place.
class BoundedWorkerPool : public httplib::TaskQueue {
 public:
  BoundedWorkerPool(size_t workers, size_t max_pending) : serving_(max_pending), rejecting_(max_pending) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(serving_, false); });
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { work(rejecting_, true); });
  }

  void enqueue(std::function<void()> fn) override {
    if (serving_.try_push(fn, mutex_, ready_)) return;
    if (rejecting_.try_push(fn, mutex_, ready_)) return;
    t_overflow = true;
    fn();
    t_overflow = false;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutting_down_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  struct Queue {
    explicit Queue(size_t cap) : cap(cap) {}
    bool try_push(std::function<void()>& fn, std::mutex& mutex, std::condition_variable& ready) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (jobs.size() >= cap) return false;
        jobs.push_back(std::move(fn));
      }
      ready.notify_all();
      return true;
    }
    size_t cap;
    std::deque<std::function<void()>> jobs;
  };

  void work(Queue& q, bool overflow) {
    t_overflow = overflow;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return shutting_down_ || !q.jobs.empty(); });
        if (q.jobs.empty()) return;  // shutting down with nothing left
        fn = std::move(q.jobs.front());
        q.jobs.pop_front();
      }
      fn();
    }
  }

  Queue serving_, rejecting_;  // guarded by mutex_
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  bool shutting_down_ = false;
};

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// Counts a completion request in flight for as long as any copy of the guard lives (the streaming provider and
// its releaser share one).
struct InFlight {
  explicit InFlight(std::atomic<int>& counter) : counter(counter) {}
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

}  // namespace

HttpServer::HttpServer(ServerOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  TS_CHECK(options_.max_batch >= 1, "max_batch must be >= 1");
  TS_CHECK(options_.max_queue >= 0, "max_queue must be >= 0");
  // httplib writes with send(..., 0): a peer that went away would raise SIGPIPE and kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  const size_t workers = size_t(options_.max_batch + options_.max_queue + std::max(1, options_.spare_workers));
  http_->new_task_queue = [workers] { return new BoundedWorkerPool(workers, workers); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(options_.read_timeout_s, 0);
  http_->set_write_timeout(options_.read_timeout_s, 0);
  http_->set_keep_alive_timeout(options_.keep_alive_timeout_s);
  http_->set_tcp_nodelay(true);
  if (options_.access_log)
    http_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s %s:%d -> %d\n", req.method.c_str(), req.path.c_str(), req.remote_addr.c_str(),
                   req.remote_port, res.status);
    });
  install_routes();
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

void HttpServer::send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                            const std::string& code, const std::string& param) {
  res.status = status;
  if (status == 429 || status == 503) res.set_header("Retry-After", std::to_string(options_.retry_after_s));
  res.set_content(dump_json(error_json(message, type, code, param)), "application/json");
}

void HttpServer::install_routes() {
  using httplib::Server;
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_overflow) {
      res.set_header("Connection", "close");
      send_error(res, 503, "the server is overloaded; retry later", "server_error", "overloaded");
      return Server::HandlerResponse::Handled;
    }
    if (!options_.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
      const std::string auth = req.get_header_value("Authorization");
      if (auth.empty()) {
        send_error(res, 401, "missing API key: send 'Authorization: Bearer <key>'", "invalid_request_error",
                   "missing_api_key");
        return Server::HandlerResponse::Handled;
      }
      if (!bearer_matches(auth, options_.api_key)) {
        send_error(res, 401, "incorrect API key", "invalid_request_error", "invalid_api_key");
        return Server::HandlerResponse::Handled;
      }
    }
    return Server::HandlerResponse::Unhandled;
  });
  // Every response with status >= 400 passes here: fill in OpenAI error JSON where httplib left the body empty
  // (404 unknown path, 413 body too large, 400 unparsable request line), and count it.
  http_->set_error_handler(Server::HandlerWithResponse([this](const httplib::Request&, httplib::Response& res) {
    metrics_.rejected(res.status);
    if (!res.body.empty()) return Server::HandlerResponse::Unhandled;
    switch (res.status) {
      case 404: send_error(res, 404, "no such endpoint", "invalid_request_error", "not_found"); break;
      case 413:
        send_error(res, 413, "the request body is larger than " + std::to_string(options_.max_body_bytes) + " bytes",
                   "invalid_request_error", "request_too_large");
        break;
      default:
        send_error(res, res.status, "the request could not be processed", res.status >= 500 ? "server_error" : "invalid_request_error",
                   "http_" + std::to_string(res.status));
    }
    return Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what, "server_error", "internal_error");
  });

  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    switch (state_.load()) {
      case State::Ready: res.set_content("{\"status\":\"ok\"}", "application/json"); break;
      case State::Loading: send_error(res, 503, "the model is loading", "unavailable_error", "loading"); break;
      case State::Draining: send_error(res, 503, "the server is shutting down", "unavailable_error", "draining"); break;
    }
  });
  const auto model_object = [this] {
    return json{{"id", model_.name}, {"object", "model"}, {"created", (long long)std::time(nullptr)},
                {"owned_by", "treespark"}, {"max_model_len", model_.max_context}};
  };
  http_->Get("/v1/models", [this, model_object](const httplib::Request&, httplib::Response& res) {
    if (state_.load() == State::Loading) return send_error(res, 503, "the model is loading", "unavailable_error", "loading");
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
  });
  // OpenAI's retrieve-model call: the served model by its id, else 404.
  http_->Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    if (state_.load() == State::Loading) return send_error(res, 503, "the model is loading", "unavailable_error", "loading");
    if (req.matches[1] != model_.name)
      return send_error(res, 404, "the model '" + std::string(req.matches[1]) + "' does not exist; this server serves '" +
                                      model_.name + "'",
                        "invalid_request_error", "model_not_found");
    res.set_content(dump_json(model_object()), "application/json");
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    BackendMetrics bm;
    Backend* backend = nullptr;
    std::string name;
    {
      std::lock_guard<std::mutex> lock(ready_mutex_);
      backend = backend_;
      name = model_.name;
    }
    if (backend) bm = backend->metrics();
    res.set_content(metrics_.render(name, backend ? &bm : nullptr, state_name(), in_flight_.load()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, false); });
  http_->Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, true); });
}

void HttpServer::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  try {
    const State state = state_.load();
    if (state == State::Loading) return send_error(res, 503, "the model is loading", "unavailable_error", "loading");
    if (state == State::Draining)
      return send_error(res, 503, "the server is shutting down", "unavailable_error", "draining");
    CompletionRequest request = parse_completion_request(req.body, chat);
    PreparedPrompt prompt = prepare_prompt(request, model_);

    auto in_flight = std::make_shared<InFlight>(in_flight_);
    if (in_flight_.fetch_add(1) >= options_.max_batch + options_.max_queue)
      return send_error(res, 429, "the request queue is full; retry later", "rate_limit_error", "queue_full");

    auto completion = std::make_shared<Completion>(request, model_, int(prompt.ids.size()), metrics_);
    BackendRequest br;
    br.prompt = std::move(prompt.ids);
    br.sampling = request.sampling;
    // Without a seed every request samples afresh, as OpenAI's and vLLM's do (a fixed default made every unseeded
    // T > 0 request return the same text: regenerate, best-of-n and pass@k broke).
    if (!request.seed_given) br.sampling.seed = fresh_seed();
    br.max_tokens = prompt.max_tokens;
    br.stop_ids = model_.stop_ids;
    const int prompt_tokens = int(br.prompt.size());
    SubmitResult submitted =
        backend_->submit(std::move(br), [completion](BackendEvent&& e) { completion->channel().push(std::move(e)); });
    switch (submitted.status) {
      case SubmitStatus::Accepted: break;
      case SubmitStatus::QueueFull:
        return send_error(res, 429, "the request queue is full; retry later" +
                                        (submitted.message.empty() ? "" : " (" + submitted.message + ")"),
                          "rate_limit_error", "queue_full");
      case SubmitStatus::Draining:
        return send_error(res, 503, "the server is shutting down", "unavailable_error", "draining");
      case SubmitStatus::Invalid:
        return send_error(res, 400, submitted.message, "invalid_request_error", "invalid_request");
    }
    completion->set_backend(backend_, submitted.id);
    metrics_.request_started(prompt_tokens);

    if (request.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      struct StreamState {
        bool started = false;
        std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
      };
      auto st = std::make_shared<StreamState>();
      const auto heartbeat = std::chrono::milliseconds(options_.heartbeat_ms);
      res.set_chunked_content_provider(
          "text/event-stream",
          [completion, st, heartbeat, in_flight](size_t, httplib::DataSink& sink) {
            auto write = [&](const std::string& s) {
              st->last_write = std::chrono::steady_clock::now();
              return sink.write(s.data(), s.size());
            };
            if (!st->started) {
              st->started = true;
              if (completion->request().chat && !write(sse(completion->first_chunk()))) return false;
            }
            const std::string text = completion->step(heartbeat);
            if (!text.empty() && !write(sse(completion->text_chunk(text)))) return false;
            if (completion->finished()) {
              if (completion->failed()) {
                if (!write(sse(error_json(completion->error(), "server_error", "generation_failed")))) return false;
              } else {
                if (!write(sse(completion->final_chunk()))) return false;
                if (completion->request().include_usage && !write(sse(completion->usage_chunk()))) return false;
              }
              if (!write("data: [DONE]\n\n")) return false;
              sink.done();
              return true;
            }
            // Nothing to send for a while: a comment line, so a client that went away is noticed.
            if (std::chrono::steady_clock::now() - st->last_write >= heartbeat && !write(": keep-alive\n\n"))
              return false;
            return true;
          },
          [completion](bool) { completion->abandon(); });  // a no-op once finished
      return;
    }
    // Nothing is written until the answer is ready, so a client that leaves is seen only by watching its socket:
    // checked every 250 ms, it frees the slot and KV well within a second.
    ConnectionWatch watch(req.remote_addr, req.remote_port, req.local_port);
    while (!completion->finished()) {
      completion->step(std::chrono::milliseconds(250));
      if (!completion->finished() && watch.peer_closed()) {
        completion->abandon();
        return;
      }
    }
    if (completion->failed())
      return send_error(res, 500, completion->error(), "server_error", "generation_failed");
    res.set_content(dump_json(completion->response()), "application/json");
  } catch (const ApiError& e) {
    res.status = e.status;
    if (e.status == 429 || e.status == 503) res.set_header("Retry-After", std::to_string(options_.retry_after_s));
    res.set_content(dump_json(error_json(e)), "application/json");
  } catch (const std::exception& e) {
    send_error(res, 500, std::string("internal error: ") + e.what(), "server_error", "internal_error");
  }
}

int HttpServer::bind() {
  // httplib listens with a backlog of 5: a burst of clients would see resets. Remember the socket and widen the
  // backlog once it is listening (listen() again on a listening socket only changes the backlog).
  std::atomic<int> listen_fd{-1};
  http_->set_socket_options([&listen_fd](int sock) {
    httplib::default_socket_options(sock);
    listen_fd.store(sock);
  });
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  TS_CHECK(port_ > 0, "cannot listen on ", options_.host, ":", options_.port);
  if (listen_fd.load() >= 0) ::listen(listen_fd.load(), 1024);
  http_->set_socket_options(httplib::default_socket_options);
  return port_;
}

void HttpServer::start() {
  TS_CHECK(port_ > 0, "HttpServer::start before bind");
  listener_ = std::thread([this] { http_->listen_after_bind(); });
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

void HttpServer::begin_drain() { state_.store(State::Draining); }

bool HttpServer::wait_idle(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (in_flight_.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  http_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace ts::server
