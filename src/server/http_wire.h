// The bytes of HTTP/1.1 responses: a status line with its reason phrase, header fields, chunked framing. Pure
// string formatting, shared by the I/O thread and the workers (http_transport.cc), tested on its own.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ts::server::wire {

using Fields = std::vector<std::pair<std::string, std::string>>;

const char* reason_phrase(int status);  // "OK", "Not Found", ...; "Unknown" for a status it does not list
// Status line and fields of a response with a Content-Length body; ends with the blank line.
std::string response_head(int status, const std::string& content_type, const Fields& fields, bool keep_alive,
                          size_t content_length);
// Status line and fields of a chunked response; ends with the blank line.
std::string chunked_head(int status, const std::string& content_type, const Fields& fields, bool keep_alive);
std::string chunk(std::string_view data);  // "<hex size>\r\n<data>\r\n" (data non-empty)
inline std::string last_chunk() { return "0\r\n\r\n"; }

}  // namespace ts::server::wire
