// Raw loopback sockets for transport tests: what an HTTP client library would not let a test do (partial headers,
// pipelining, half-close, oversized lines), and a reader that splits a byte stream into HTTP/1.1 responses.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace ts::server::testing {

inline int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ::close(fd), -1;
  return fd;
}

// Sends all of `data` unless the peer stops taking it; returns the bytes sent.
inline size_t send_some(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
  return sent;
}

// Reads until the peer closes or `limit_s` passes; returns what arrived.
inline std::string read_until_close(int fd, double limit_s, bool* closed = nullptr) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  if (closed) *closed = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return out;
    }
    out.append(buf, size_t(n));
  }
}

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // chunked framing removed
};

// Splits `bytes` into the responses it holds, in order (a response cut short ends the list).
inline std::vector<RawResponse> parse_responses(const std::string& bytes) {
  std::vector<RawResponse> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t head_end = bytes.find("\r\n\r\n", pos);
    if (head_end == std::string::npos) break;
    RawResponse r;
    const std::string head = bytes.substr(pos, head_end - pos);
    r.status = std::atoi(head.c_str() + head.find(' ') + 1);
    for (size_t line = head.find("\r\n"); line != std::string::npos;) {
      const size_t next = head.find("\r\n", line + 2);
      const std::string field = head.substr(line + 2, next == std::string::npos ? std::string::npos : next - line - 2);
      const size_t colon = field.find(':');
      if (colon != std::string::npos) {
        std::string name = field.substr(0, colon);
        for (char& c : name) c = char(std::tolower((unsigned char)c));
        r.headers[name] = field.substr(field.find_first_not_of(' ', colon + 1));
      }
      line = next;
    }
    pos = head_end + 4;
    if (r.headers.count("content-length")) {
      const size_t n = std::stoul(r.headers["content-length"]);
      if (pos + n > bytes.size()) break;
      r.body = bytes.substr(pos, n);
      pos += n;
    } else if (r.headers["transfer-encoding"] == "chunked") {
      bool complete = false;
      while (pos < bytes.size()) {
        const size_t eol = bytes.find("\r\n", pos);
        if (eol == std::string::npos) break;
        const size_t n = std::stoul(bytes.substr(pos, eol - pos), nullptr, 16);
        if (eol + 2 + n + 2 > bytes.size()) break;
        r.body += bytes.substr(eol + 2, n);
        pos = eol + 2 + n + 2;
        if (n == 0) {
          complete = true;
          break;
        }
      }
      if (!complete) break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ts::server::testing
