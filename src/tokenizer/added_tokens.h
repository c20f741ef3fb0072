// tokenizer.json "added_tokens": strings matched in the input before any other processing and mapped straight
// to their ids (special tokens such as <|im_start|>, and non-special ones such as <think>).
//
// Matching is leftmost-longest. With `parse_special` false, tokens marked special are not matched (their text is
// tokenized as ordinary text) while non-special added tokens still are, as in the Rust library's
// split_special_tokens mode; this is how chat message contents are encoded so that a user cannot forge turn
// markers. lstrip/rstrip swallow the white space on that side; single_word requires word boundaries (ASCII
// letters, digits, '_' and any non-ASCII character count as word characters).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ts::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// One piece of input after splitting: either an added token's id or a stretch of ordinary text.
struct Segment {
  std::string_view text;  // ordinary text (empty for a token)
  int32_t token_id = -1;  // >= 0 for an added token
};

class AddedVocabulary {
 public:
  static AddedVocabulary from_json(const nlohmann::json& added_tokens);  // the "added_tokens" array (may be null)

  // Splits `text` at the added tokens whose `normalized` flag equals `normalized` (the raw input is split by the
  // unnormalized ones, then each normalized stretch by the normalized ones). Appends to `out`.
  // `special_ok`, when not empty ([text.size()] bytes), further limits special tokens to stretches where it is
  // nonzero at every byte (chat encoding: the template's own markup, never message contents).
  void split(std::string_view text, bool parse_special, bool normalized, std::vector<Segment>& out,
             std::string_view special_ok = {}) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* by_id(int32_t id) const;             // nullptr if `id` is not an added token
  const AddedToken* by_content(std::string_view s) const;  // nullptr if no added token has this text
  bool has_normalized() const { return has_normalized_; }

 private:
  std::vector<AddedToken> tokens_;
  std::vector<int32_t> by_first_byte_[256];  // indexes into tokens_, longest content first
  bool has_normalized_ = false;
};

}  // namespace ts::tok
