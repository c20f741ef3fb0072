#include "server/http_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "server/http_wire.h"

namespace ts::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, beast::string_view(name.data(), name.size()))) return v;
  return "";
}

namespace {

// A fixed set of threads over a bounded queue: try_submit() refuses once `capacity` jobs wait or run.
class WorkerPool {
 public:
  WorkerPool(int threads, std::atomic<int>& busy) : capacity_(threads), busy_(busy) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~WorkerPool() { shutdown(); }
  bool try_submit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || busy_.load() >= capacity_) return false;  // busy_ counts queued and running jobs
      jobs_.push_back(std::move(job));
      busy_.fetch_add(1);  // counted from now, so a burst cannot queue past capacity
    }
    ready_.notify_one();
    return true;
  }
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
      busy_.fetch_sub(1);
    }
  }
  const int capacity_;
  std::atomic<int>& busy_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;  // guarded by mutex_
  bool stopping_ = false;
};

// Writes a worker's response straight to the socket (the I/O thread does not touch a connection while a worker
// has it): non-blocking sends, waiting in poll() for at most write_timeout_s without progress.
class SocketWriter final : public ResponseWriter {
 public:
  // on_status: called with the status before it is written (counters are current when the client reads them).
  SocketWriter(int fd, double write_timeout_s, bool keep_alive, std::function<void(int)> on_status)
      : fd_(fd), write_timeout_ms_(int(write_timeout_s * 1000)), keep_alive_(keep_alive), on_status_(std::move(on_status)) {}

  bool send(const HttpResponse& r) override {
    if (started_) return false;
    started_ = true;
    status_ = r.status;
    on_status_(status_);
    return write_all(wire::response_head(r.status, r.content_type, r.headers, keep_alive_, r.body.size()) + r.body);
  }
  bool begin_chunked(int status, const std::string& content_type,
                     const std::vector<std::pair<std::string, std::string>>& headers) override {
    if (started_) return false;
    started_ = true;
    status_ = status;
    on_status_(status_);
    return write_all(wire::chunked_head(status, content_type, headers, keep_alive_));
  }
  bool write_chunk(std::string_view data) override { return data.empty() || write_all(wire::chunk(data)); }
  bool end_chunked() override { return write_all(wire::last_chunk()); }
  bool started() const override { return started_; }
  PeerState peer_state() override {
    if (failed_) return PeerState::Gone;
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return PeerState::Open;
    if (n == 0) return PeerState::HalfClosed;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return PeerState::Open;
    return PeerState::Gone;
  }
  bool failed() const { return failed_; }
  int status() const { return status_; }

 private:
  bool write_all(std::string_view data) {
    while (!failed_ && !data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        data.remove_prefix(size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        const int ready = ::poll(&p, 1, write_timeout_ms_);
        if (ready > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
        if (ready < 0 && errno == EINTR) continue;
      }
      failed_ = true;  // an error, or no progress within the timeout
    }
    return !failed_;
  }

  const int fd_;
  const int write_timeout_ms_;
  const bool keep_alive_;
  const std::function<void(int)> on_status_;
  bool started_ = false, failed_ = false;
  int status_ = 0;
};

}  // namespace

class Connection;

struct HttpTransport::Impl {
  Impl(HttpTransport& owner, HttpLimits limits, TransportHooks hooks)
      : owner(owner), limits(limits), hooks(std::move(hooks)), acceptor(io), accept_retry(io) {}

  void accept();
  void connection_closed() { owner.open_connections_.fetch_sub(1); }
  bool reserve_body(size_t bytes) {
    size_t used = body_bytes.load();
    do {
      if (used + bytes > limits.body_budget_bytes) return false;
    } while (!body_bytes.compare_exchange_weak(used, used + bytes));
    return true;
  }

  // Declared before the I/O context: handlers it still holds when it is destroyed own connections, whose
  // destructors return their body reservation and count.
  HttpTransport& owner;
  const HttpLimits limits;
  const TransportHooks hooks;
  std::atomic<size_t> body_bytes{0};
  std::atomic<bool> draining{false};
  bool stopped = false;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;  // I/O thread only
  net::io_context io{1};
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  std::thread io_thread;
  std::unique_ptr<WorkerPool> workers;
};

// One client connection, driven on the I/O thread, lent to a worker while a worker handles its request.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpTransport::Impl& t, tcp::socket socket)
      : t_(t), stream_(std::move(socket)), buffer_(t.limits.max_header_bytes + 65536) {
    error_code ec;
    const auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    stream_.socket().set_option(tcp::no_delay(true), ec);
  }
  ~Connection() {
    release_body();
    t_.connection_closed();
  }

  void start() {
    t_.connections[this] = weak_from_this();
    read_request();
  }

  // Drain: a connection between requests or receiving one closes now; one whose request is being answered
  // closes after its response.
  void close_if_reading() {
    if (phase_ == Phase::Reading) close();
  }
  // Stop: close now; a worker's writes then fail (the descriptor stays valid until the worker hands back).
  void shut() {
    if (phase_ == Phase::Worker) {
      error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    } else {
      close();
    }
  }

 private:
  enum class Phase { Reading, Writing, Worker, Closed };

  void read_request() {
    phase_ = Phase::Reading;
    if (t_.draining.load() && requests_ > 0) return close();
    buffer_.shrink_to_fit();
    parser_.emplace();
    parser_->header_limit(uint32_t(t_.limits.max_header_bytes));
    parser_->body_limit(t_.limits.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(long(t_.limits.header_timeout_s * 1000)));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (phase_ == Phase::Closed) return;
    if (ec == http::error::header_limit)
      return fail(431, "the request line and header fields exceed " + std::to_string(t_.limits.max_header_bytes) +
                           " bytes", "header_too_large");
    if (ec == http::error::body_limit) return fail_body_too_large();  // a Content-Length over the cap
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == net::error::eof)
      return close();
    if (ec) return fail(400, "malformed HTTP request: " + ec.message(), "bad_request");
    ++requests_;
    const auto& head = parser_->get();
    if (std::distance(head.begin(), head.end()) > t_.limits.max_header_fields)
      return fail(431, "more than " + std::to_string(t_.limits.max_header_fields) + " header fields",
                  "header_too_large");
    const auto length = parser_->content_length();
    if (length && *length > t_.limits.max_body_bytes) return fail_body_too_large();
    const size_t body_bytes = length ? size_t(*length) : parser_->chunked() ? t_.limits.max_body_bytes : 0;
    if (body_bytes > 0) {
      if (!t_.reserve_body(body_bytes))
        return fail(503, "the server is receiving too many request bodies; retry later", "overloaded");
      reserved_ = body_bytes;
    }
    if (parser_->is_done()) return dispatch();
    stream_.expires_after(std::chrono::milliseconds(long(t_.limits.body_timeout_s * 1000)));
    if (beast::iequals(head[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->phase_ == Phase::Closed) return;
      if (ec == http::error::body_limit) return self->fail_body_too_large();
      if (ec) return self->close();
      self->dispatch();
    });
  }

  void dispatch() {
    auto& msg = parser_->get();
    auto request = std::make_shared<HttpRequest>();
    request->method = std::string(msg.method_string());
    request->target = std::string(msg.target());
    request->path = request->target.substr(0, request->target.find('?'));
    for (const auto& f : msg) request->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    request->body = std::move(msg.body());
    request->remote = remote_;
    keep_alive_ = msg.keep_alive() && !t_.draining.load();
    parser_.reset();

    Route route;
    try {
      route = t_.hooks.route(*request);
    } catch (const std::exception& e) {
      route.response = t_.hooks.error(500, std::string("internal error: ") + e.what(), "internal_error");
    }
    if (!route.worker) return respond(route.response, *request);

    phase_ = Phase::Worker;
    stream_.expires_never();
    auto self = shared_from_this();
    const bool keep_alive = keep_alive_;
    const bool submitted = t_.workers->try_submit([self, request, keep_alive, handler = std::move(route.worker)] {
      const auto& hooks = self->t_.hooks;
      SocketWriter writer(self->stream_.socket().native_handle(), self->t_.limits.write_timeout_s, keep_alive,
                          [&](int status) {
                            if (hooks.responded) hooks.responded(request->method, request->path, request->remote, status);
                          });
      try {
        handler(*request, writer);
      } catch (const std::exception& e) {
        if (!writer.started())
          writer.send(self->t_.hooks.error(500, std::string("internal error: ") + e.what(), "internal_error"));
      }
      if (!writer.started()) writer.send(self->t_.hooks.error(500, "the request got no response", "internal_error"));
      const bool reusable = keep_alive && !writer.failed();
      net::post(self->t_.io, [self, reusable] { self->after_worker(reusable); });
    });
    if (!submitted) {
      phase_ = Phase::Reading;
      keep_alive_ = false;
      respond(t_.hooks.error(503, "the server is overloaded; retry later", "overloaded"), *request);
    }
  }

  void after_worker(bool reusable) {
    release_body();
    if (phase_ == Phase::Closed) return;
    if (!reusable || t_.stopped) return close();
    read_request();
  }

  // A response from the I/O thread; then the next request, or close.
  void respond(const HttpResponse& r, const HttpRequest& request) {
    if (t_.hooks.responded) t_.hooks.responded(request.method, request.path, request.remote, r.status);
    write_then(wire::response_head(r.status, r.content_type, r.headers, keep_alive_, r.body.size()) + r.body,
               keep_alive_);
  }

  void write_then(std::string bytes, bool keep_alive) {
    phase_ = Phase::Writing;
    out_ = std::move(bytes);
    stream_.expires_after(std::chrono::milliseconds(long(t_.limits.write_timeout_s * 1000)));
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this(), keep_alive](error_code ec, size_t) {
      self->release_body();
      if (self->phase_ == Phase::Closed) return;
      if (ec) return self->close();
      if (keep_alive) return self->read_request();
      self->linger();
    });
  }

  // An error the transport answers itself; the connection closes after it.
  void fail(int status, const std::string& message, const std::string& code) {
    const HttpResponse r = t_.hooks.error(status, message, code);
    if (t_.hooks.responded) t_.hooks.responded("", "", remote_, status);
    write_then(wire::response_head(r.status, r.content_type, r.headers, false, r.body.size()) + r.body, false);
  }
  void fail_body_too_large() {
    fail(413, "the request body is larger than " + std::to_string(t_.limits.max_body_bytes) + " bytes",
         "request_too_large");
  }

  // Closing a socket with unread input resets it, which can destroy the response the client has not read yet:
  // stop sending, read and discard what the client still sends for up to a second, then close.
  void linger() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    phase_ = Phase::Writing;
    stream_.expires_after(std::chrono::seconds(1));
    discard_ = 0;
    drain_input();
  }
  void drain_input() {
    scratch_.resize(4096);
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](error_code ec, size_t n) {
      self->discard_ += n;
      if (ec || self->discard_ > (1u << 20)) return self->close();
      self->drain_input();
    });
  }

  void close() {
    if (phase_ == Phase::Closed) return;
    phase_ = Phase::Closed;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    t_.connections.erase(this);
  }

  void release_body() {
    if (reserved_) t_.body_bytes.fetch_sub(reserved_);
    reserved_ = 0;
  }

  HttpTransport::Impl& t_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;  // bytes read, not yet parsed (bounded: a header, one read of body, pipelined bytes)
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string out_;            // the response being written by the I/O thread
  std::string scratch_;        // [4096] discarded input while lingering
  size_t discard_ = 0;
  size_t reserved_ = 0;        // body bytes this request holds of the budget
  Phase phase_ = Phase::Reading;
  bool keep_alive_ = true;
  int requests_ = 0;
  std::string remote_;
};

void HttpTransport::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (or another transient failure): try again shortly instead of spinning.
      accept_retry.expires_after(std::chrono::milliseconds(20));
      accept_retry.async_wait([this](error_code) { accept(); });
      return;
    }
    if (owner.open_connections_.load() >= limits.max_connections) {
      const HttpResponse r = hooks.error(503, "too many open connections; retry later", "overloaded");
      const std::string bytes = wire::response_head(r.status, r.content_type, r.headers, false, r.body.size()) + r.body;
      [[maybe_unused]] ssize_t n = ::send(socket.native_handle(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (hooks.responded) hooks.responded("", "", "", 503);
      error_code ignored;
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      socket.close(ignored);
    } else {
      owner.open_connections_.fetch_add(1);
      std::make_shared<Connection>(*this, std::move(socket))->start();
    }
    accept();
  });
}

HttpTransport::HttpTransport(HttpLimits limits, TransportHooks hooks)
    : impl_(std::make_unique<Impl>(*this, limits, std::move(hooks))) {
  TS_CHECK(impl_->hooks.route && impl_->hooks.error, "HttpTransport needs a router and an error formatter");
  TS_CHECK(limits.workers >= 1 && limits.max_connections >= 1, "HttpTransport: workers and connections must be >= 1");
}

HttpTransport::~HttpTransport() { stop(); }

int HttpTransport::bind(const std::string& host, int port) {
  error_code ec;
  const auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  TS_CHECK(!ec, "cannot listen on ", host, ": not an IP address (", ec.message(), ")");
  const tcp::endpoint endpoint(address, uint16_t(port));
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(1024, ec);
  TS_CHECK(!ec, "cannot listen on ", host, ":", port, ": ", ec.message());
  return acceptor.local_endpoint().port();
}

void HttpTransport::start() {
  TS_CHECK(impl_->acceptor.is_open(), "HttpTransport::start before bind");
  impl_->workers = std::make_unique<WorkerPool>(impl_->limits.workers, busy_workers_);
  impl_->accept();
  impl_->io_thread = std::thread([this] { impl_->io.run(); });
}

void HttpTransport::drain() {
  impl_->draining.store(true);
  net::post(impl_->io, [this] {
    for (auto& [_, weak] : std::unordered_map<Connection*, std::weak_ptr<Connection>>(impl_->connections))
      if (auto c = weak.lock()) c->close_if_reading();
  });
}

void HttpTransport::stop() {
  if (!impl_ || impl_->stopped) return;
  Impl& t = *impl_;
  if (t.io_thread.joinable()) {
    std::promise<void> closed;
    net::post(t.io, [&t, &closed] {
      t.stopped = true;
      error_code ec;
      t.acceptor.close(ec);
      t.accept_retry.cancel();
      for (auto& [_, weak] : std::unordered_map<Connection*, std::weak_ptr<Connection>>(t.connections))
        if (auto c = weak.lock()) c->shut();
      closed.set_value();
    });
    closed.get_future().wait();
  }
  t.stopped = true;
  if (t.workers) t.workers->shutdown();  // handlers see their writes fail and return
  t.io.stop();
  if (t.io_thread.joinable()) t.io_thread.join();
}

}  // namespace ts::server
