// Errors and checks.
//
// treespark reports bad input (corrupt checkpoints, bad JSON, over-long prompts) by throwing ts::Error with a
// message that says where and what was expected; the CLI and server catch it at their boundary, so the serving
// path never aborts the process. Two levels of checks:
//   TS_CHECK(cond, ...)  always on; for boundaries (files, user input, API arguments).
//   TS_DCHECK(cond, ...) debug/sanitizer builds only (TS_DEBUG_CHECKS=1); for hot loops.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ts {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// cat(a, b, c) -> string, using operator<< for each piece.
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

}  // namespace ts

#define TS_FAIL(...) ::ts::throw_error(__FILE__, __LINE__, ::ts::cat(__VA_ARGS__))
#define TS_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) ::ts::throw_error(__FILE__, __LINE__, ::ts::cat(__VA_ARGS__));   \
  } while (0)

#if defined(TS_DEBUG_CHECKS) && TS_DEBUG_CHECKS
#define TS_DCHECK(cond, ...) TS_CHECK(cond, "debug check failed: " #cond " ", __VA_ARGS__)
#else
#define TS_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#endif
