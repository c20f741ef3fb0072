// Whether the client of a request still being answered is connected.
//
// cpp-httplib (0.11) gives a handler no socket, and notices a closed connection only when a write fails: a
// streaming response writes (tokens, SSE heartbeats) and finds out within a heartbeat, but a non-streaming one
// writes once, at the end, so a client that gave up would keep its slot and KV for the whole generation. The
// watch finds the handler's socket among the process's descriptors by the connection's two endpoints (the
// request's local port and remote address and port, unique per TCP connection) and asks the kernel whether the
// peer has closed it, as httplib's own later versions do (poll, then a one-byte MSG_PEEK: 0 bytes = closed).
#pragma once

#include <string>

namespace ts::server {

class ConnectionWatch {
 public:
  ConnectionWatch(std::string remote_addr, int remote_port, int local_port);

  // True once the peer has closed or reset the connection. False while it is open, and when the socket cannot be
  // found (the request then runs to its end, as without a watch). Costs a poll and a getpeername; the first call
  // also scans /proc/self/fd once.
  bool peer_closed();

 private:
  bool is_our_socket(int fd) const;  // fd is a TCP socket with our endpoints
  int find_socket() const;           // -1 when none matches

  std::string remote_addr_;
  int remote_port_ = -1, local_port_ = -1;
  int fd_ = -1;
  bool searched_ = false;
};

}  // namespace ts::server
