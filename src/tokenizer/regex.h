// A compiled PCRE2 pattern (UTF + Unicode properties, JIT) for the split patterns in tokenizer.json files.
// The files' patterns are written for Oniguruma (the Rust library's engine); the ones real tokenizers use
// (\p{L}, \s, (?i:...), look-ahead) mean the same in PCRE2 with UCP, which the golden tests confirm, except
// white space: PCRE2's \s also matches U+180E MONGOLIAN VOWEL SEPARATOR, Oniguruma's and Rust regex's do not (they
// use the Unicode White_Space property, as does @huggingface/tokenizers). Patterns are compiled with \s and \S
// rewritten to \p{White_Space} / \P{White_Space} (hf_white_space_pattern), inside and outside classes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ts::tok {

// The pattern with every \s / \S escape replaced by \p{White_Space} / \P{White_Space} (escaped backslashes kept).
std::string hf_white_space_pattern(const std::string& pattern);

class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws ts::Error with PCRE2's message and offset
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches, left to right, as [begin, end) byte offsets into `text` (valid UTF-8, already
  // checked). An empty match advances by one code point so that the scan always ends.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace ts::tok
