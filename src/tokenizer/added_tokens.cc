#include "tokenizer/added_tokens.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace ts::tok {

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& added_tokens) {
  AddedVocabulary v;
  if (added_tokens.is_null()) return v;
  TS_CHECK(added_tokens.is_array(), "tokenizer.json: added_tokens must be an array");
  for (const auto& t : added_tokens) {
    AddedToken token;
    token.id = t.at("id").get<int32_t>();
    token.content = t.at("content").get<std::string>();
    token.special = t.value("special", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.single_word = t.value("single_word", false);
    token.normalized = t.value("normalized", !token.special);
    TS_CHECK(token.id >= 0 && !token.content.empty(), "tokenizer.json: added token ", t.dump(),
             " needs a non-negative id and non-empty content");
    check_utf8(token.content, "added token content");
    v.has_normalized_ |= token.normalized;
    v.tokens_.push_back(std::move(token));
  }
  for (int32_t i = 0; i < int32_t(v.tokens_.size()); ++i)
    v.by_first_byte_[static_cast<unsigned char>(v.tokens_[i].content[0])].push_back(i);
  for (auto& bucket : v.by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return v.tokens_[a].content.size() > v.tokens_[b].content.size();
    });
  }
  return v;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  for (const auto& t : tokens_)
    if (t.id == id) return &t;
  return nullptr;
}

const AddedToken* AddedVocabulary::by_content(std::string_view s) const {
  if (s.empty()) return nullptr;
  for (int32_t i : by_first_byte_[static_cast<unsigned char>(s[0])])
    if (tokens_[i].content == s) return &tokens_[i];
  return nullptr;
}

namespace {

bool is_word_byte(unsigned char b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_' || b >= 0x80;
}

// Start of the run of white space ending at `end` (for lstrip).
size_t skip_space_back(std::string_view text, size_t begin, size_t end) {
  while (end > begin) {
    size_t p = end - 1;
    while (p > begin && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
    size_t q = p;
    if (!is_unicode_space(utf8_next(text, q))) break;
    end = p;
  }
  return end;
}

// End of the run of white space starting at `pos` (for rstrip).
size_t skip_space_forward(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t q = pos;
    if (!is_unicode_space(utf8_next(text, q))) break;
    pos = q;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::split(std::string_view text, bool parse_special, bool normalized, std::vector<Segment>& out,
                            std::string_view special_ok) const {
  auto allowed_here = [&](size_t pos, size_t len) {
    if (special_ok.empty()) return true;
    for (size_t i = pos; i < pos + len; ++i)
      if (special_ok[i] == 0) return false;
    return true;
  };
  size_t text_start = 0;  // start of the pending ordinary text
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    for (int32_t i : bucket) {
      const AddedToken& t = tokens_[i];
      if (t.normalized != normalized || (t.special && !parse_special)) continue;
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (t.special && !allowed_here(pos, t.content.size())) continue;
      if (t.single_word) {
        size_t end = pos + t.content.size();
        bool bounded_left = pos == 0 || !is_word_byte(text[pos - 1]) || !is_word_byte(t.content.front());
        bool bounded_right = end == text.size() || !is_word_byte(text[end]) || !is_word_byte(t.content.back());
        if (!bounded_left || !bounded_right) continue;
      }
      hit = &t;
      break;
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t text_end = hit->lstrip ? skip_space_back(text, text_start, pos) : pos;
    if (text_end > text_start) out.push_back({text.substr(text_start, text_end - text_start), -1});
    out.push_back({std::string_view(), hit->id});
    pos += hit->content.size();
    if (hit->rstrip) pos = skip_space_forward(text, pos);
    text_start = pos;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1});
}

}  // namespace ts::tok
