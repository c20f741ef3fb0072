// Per-request token limits for the load benchmarks (bench engine, bench serve).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

namespace ts::bench {

// Request i's limit: max_tokens, or with `vary` from half to one and a half times it (max_tokens / 2 +
// 37 i mod (max_tokens + 1); mean about max_tokens). One limit for all keeps the target alone's requests in lockstep
// (admitted, prefilled and finishing together at the full batch) while speculation desynchronizes them; varied
// limits measure the arms as requests that end at different lengths do.
inline int request_max_tokens(int max_tokens, bool vary, size_t i) {
  if (!vary) return max_tokens;
  return std::max(1, max_tokens / 2 + int((37 * i) % size_t(max_tokens + 1)));
}

// What the limits are, for the benchmarks' headers: "64 tokens" or "32-96 tokens (varied limits)".
inline std::string request_limits_text(int max_tokens, bool vary) {
  if (!vary) return std::to_string(max_tokens) + " tokens";
  return std::to_string(request_max_tokens(max_tokens, true, 0)) + "-" + std::to_string(max_tokens / 2 + max_tokens) +
         " tokens (varied limits)";
}

}  // namespace ts::bench
