// HTTP/1.1 transport for the server: one event-driven I/O thread (Boost.Asio, parsing by Boost.Beast) holds every
// connection while it is idle, sending its header or sending its body, so slow and idle clients cost a few hundred
// bytes each and no thread; only a complete request reaches the router. The router answers on the I/O thread
// (health, metrics, models, every error: they stay fast while generation is saturated) or hands the request to
// a worker thread from a fixed pool (completions, which wait on generation); past the pool a request gets 503
// at once. Everything a client controls is bounded (HttpLimits): connections, header bytes and fields, the time
// to send a whole header and a whole body, body bytes (chunked ones too, counted as they stream) and the body
// bytes all connections may hold at once. Keep-alive and pipelining: requests on one connection are answered in
// order, one at a time; a client that half-closes (shutdown(SHUT_WR) after its request) still gets its answer.
// No Beast or Asio type appears in this header.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ts::server {

struct HttpLimits {
  int max_connections = 4096;           // open connections; past it a new one gets 503 and is closed
  size_t max_header_bytes = 16 << 10;   // request line + header fields; past it 431
  int max_header_fields = 100;          // past it 431
  size_t max_body_bytes = 4 << 20;      // decoded body (Content-Length or chunked); past it 413
  size_t body_budget_bytes = 64 << 20;  // bodies being received at once, all connections together; past it 503
  double header_timeout_s = 10;         // from the first wait for a request (keep-alive idle included) to its
                                        // last header byte; past it the connection is closed
  double body_timeout_s = 30;           // for the whole body; past it the connection is closed
  double write_timeout_s = 10;          // a response write that cannot progress for this long fails
  int workers = 80;                     // requests handled off the I/O thread at once; past it 503
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;
  std::string remote;  // "address:port" of the client
  std::string header(std::string_view name) const;  // first field of that name (case-insensitive), "" if none
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields (Retry-After, Cache-Control, ...)
  std::string body;
};

// What a worker's handler knows of its client while it has nothing to write.
enum class PeerState {
  Open,        // connected (it may have pipelined its next request)
  HalfClosed,  // it sent end-of-stream: it either stopped sending (shutdown(SHUT_WR)) or closed; only a write
               // tells which
  Gone,        // reset or a write failed
};

// The response of a request handled on a worker. Writes block for at most HttpLimits::write_timeout_s without
// progress and return false once the client is gone (after that every write returns false at once).
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual bool send(const HttpResponse& response) = 0;  // a whole response (Content-Length)
  // A chunked response: the status line and fields now, then chunks, then the last chunk.
  virtual bool begin_chunked(int status, const std::string& content_type,
                             const std::vector<std::pair<std::string, std::string>>& headers) = 0;
  virtual bool write_chunk(std::string_view data) = 0;  // empty data writes nothing
  virtual bool end_chunked() = 0;
  virtual bool started() const = 0;  // a status line went out
  virtual PeerState peer_state() = 0;
};

using WorkerHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;

// The router's decision for one request: a response now, or a handler to run on a worker.
struct Route {
  HttpResponse response;  // used when `worker` is empty
  WorkerHandler worker;
};

struct TransportHooks {
  std::function<Route(const HttpRequest&)> route;  // called on the I/O thread; must not block
  // A response for an error the transport finds itself (400, 413, 431, 503): status, message, code.
  std::function<HttpResponse(int, const std::string&, const std::string&)> error;
  // Called once per response sent (access log, counters): the request (method and path only when the request
  // could not be parsed) and the status.
  std::function<void(const std::string& method, const std::string& path, const std::string& remote, int status)>
      responded;
};

class HttpTransport {
 public:
  HttpTransport(HttpLimits limits, TransportHooks hooks);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  int bind(const std::string& host, int port);  // port 0: any free port; returns the port (throws ts::Error)
  void start();                                 // the I/O thread and the workers (after bind)
  // Draining: connections waiting for or receiving a request are closed now, responses in progress finish and
  // then close their connection; new connections are still answered (one request each, then closed).
  void drain();
  void stop();  // closes everything and joins every thread (idempotent); workers' writes fail from here on

  int open_connections() const { return open_connections_.load(); }
  int busy_workers() const { return busy_workers_.load(); }

  struct Impl;  // defined in http_transport.cc only

 private:
  std::atomic<int> open_connections_{0};  // before impl_: connections count themselves out as it is destroyed
  std::atomic<int> busy_workers_{0};
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts::server
