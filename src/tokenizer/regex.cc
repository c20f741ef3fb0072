#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace ts::tok {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// One match-data block and JIT stack per thread, grown on demand, so encode() stays re-entrant without
// allocating per call.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(16, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string hf_white_space_pattern(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 >= pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];  // an escape: \s and \S are rewritten, any other one is kept as written
    if (next == 's') out += "\\p{White_Space}";
    else if (next == 'S') out += "\\P{White_Space}";
    else (out += '\\') += next;
  }
  return out;
}

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string compiled = hf_white_space_pattern(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  TS_CHECK(code, "cannot compile split regex /", pattern, "/: ", pcre2_message(error), " at offset ", offset);
  // JIT makes the split several times faster (docs/results/optimization-notes.md, "Tokenizer: PCRE2 JIT for the
  // split regex"); if it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  matches.clear();
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& state = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    TS_CHECK(rc >= 0, "split regex /", pattern_, "/ failed at byte ", pos, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // empty match: skip one code point
      if (begin >= text.size()) break;
      size_t next = begin + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      pos = next;
      continue;
    }
    matches.emplace_back(begin, end);
    pos = end;
  }
}

}  // namespace ts::tok
