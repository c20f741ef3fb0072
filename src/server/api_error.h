// Errors in OpenAI's JSON shape with the HTTP status that goes with them:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": "..."}}
// Request parsing throws ApiError; the HTTP layer catches it and writes error_json() with status.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace ts::server {

struct ApiError : std::runtime_error {
  int status;        // HTTP status: 400, 401, 404, 413, 429, 500, 503
  std::string type;  // OpenAI error type: invalid_request_error, authentication_error, rate_limit_error, server_error
  std::string code;  // machine-readable reason (invalid_json, invalid_type, context_length_exceeded, ...)
  std::string param; // the offending field, "" if none

  ApiError(int status, std::string type, std::string code, std::string message, std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)),
        param(std::move(param)) {}
};

// The shorthand for the 400s parsing produces.
inline ApiError bad_request(std::string code, std::string message, std::string param = "") {
  return ApiError(400, "invalid_request_error", std::move(code), std::move(message), std::move(param));
}

inline nlohmann::json error_json(const std::string& message, const std::string& type, const std::string& code,
                                 const std::string& param = "") {
  nlohmann::json e = {{"message", message}, {"type", type}, {"code", code}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  return {{"error", e}};
}

inline nlohmann::json error_json(const ApiError& e) { return error_json(e.what(), e.type, e.code, e.param); }

// JSON text for the wire: invalid UTF-8 (a model can emit a partial byte sequence) becomes U+FFFD, never an
// exception.
inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ts::server
