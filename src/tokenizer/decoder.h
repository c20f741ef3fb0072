// The tokenizer.json "decoder", reduced to what a token contributes on its own: each id maps to a fixed byte
// string (its "piece"), the output is the concatenation of pieces, and a few rules act on the start or end of the
// whole output (Strip after Fuse, Metaspace's leading space). Invalid UTF-8 in the result becomes U+FFFD.
//
// Supported: ByteLevel, Replace (string pattern), ByteFallback, Fuse, Strip, Metaspace, Sequence, and no decoder
// (pieces joined by a space, as the reference does). Decoding rests on bytes, so a byte-fallback run that is
// invalid UTF-8 becomes one U+FFFD per maximal invalid subpart (the reference's TextDecoder does the same).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ts::tok {

class Decoder {
 public:
  static Decoder from_json(const nlohmann::json& config);  // config may be null

  // The bytes one token contributes; `is_added` for added tokens (their text is taken literally by ByteLevel).
  std::string piece(std::string_view token_text, bool is_added) const;

  // Output-level rules: strip up to `strip_start` leading and `strip_stop` trailing copies of `strip_content`.
  const std::string& strip_content() const { return strip_content_; }
  size_t strip_start() const { return strip_start_; }
  size_t strip_stop() const { return strip_stop_; }
  const std::string& separator() const { return separator_; }  // between pieces ("" unless no decoder)

 private:
  struct Step {
    enum Kind { kByteLevel, kReplace, kByteFallback, kStripEach } kind;
    std::string from, to;         // kReplace
    std::string content;          // kStripEach
    size_t start = 0, stop = 0;   // kStripEach
  };
  void add_steps(const nlohmann::json& config, bool& fused);
  std::vector<Step> steps_;
  std::string strip_content_;
  size_t strip_start_ = 0, strip_stop_ = 0;
  std::string separator_;
};

// Removes up to `count` copies of `content` from the start (or end) of `text`.
void strip_leading(std::string& text, const std::string& content, size_t count);
void strip_trailing(std::string& text, const std::string& content, size_t count);

}  // namespace ts::tok
