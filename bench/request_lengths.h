// Per-request token limits for the load benchmarks (bench engine, bench serve).
#pragma once

#include <algorithm>
#include <cstddef>

namespace ts::bench {

// Request i's limit: max_tokens, or with `vary` from half to one and a half times it (max_tokens / 2 +
// 37 i mod (max_tokens + 1); mean about max_tokens). One limit for all keeps the target alone's requests in lockstep
// (admitted, prefilled and finishing together at the full batch) while speculation desynchronizes them; varied
// limits measure the arms as requests that end at different lengths do.
inline int request_max_tokens(int max_tokens, bool vary, size_t i) {
  if (!vary) return max_tokens;
  return std::max(1, max_tokens / 2 + int((37 * i) % size_t(max_tokens + 1)));
}

}  // namespace ts::bench
