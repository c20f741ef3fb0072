#include "server/http_wire.h"

#include <cstdio>

namespace ts::server::wire {

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
  }
  return "Unknown";
}

namespace {

std::string head(int status, const std::string& content_type, const Fields& fields, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  out += "Server: treespark\r\n";
  if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : fields) out += name + ": " + value + "\r\n";
  return out;
}

}  // namespace

std::string response_head(int status, const std::string& content_type, const Fields& fields, bool keep_alive,
                          size_t content_length) {
  return head(status, content_type, fields, keep_alive) + "Content-Length: " + std::to_string(content_length) +
         "\r\n\r\n";
}

std::string chunked_head(int status, const std::string& content_type, const Fields& fields, bool keep_alive) {
  return head(status, content_type, fields, keep_alive) + "Transfer-Encoding: chunked\r\n\r\n";
}

std::string chunk(std::string_view data) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size);
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace ts::server::wire
