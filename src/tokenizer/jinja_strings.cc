#include "tokenizer/jinja_strings.h"

#include <algorithm>
#include <cstdint>

#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/unicode.h"

namespace ts::tok::jinja {

namespace {

using K = Value::Kind;

bool is_ascii_word(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

}  // namespace

Text remapped(const Text& from, std::string bytes) {
  if (bytes.size() == from.bytes.size()) {
    Text t;
    t.bytes = std::move(bytes);
    t.from_input = from.from_input;
    return t;
  }
  return Text(std::move(bytes), from.any_input());
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

Text strip(const Text& t, bool left, bool right, const Value* chars) {
  const std::string& s = t.bytes;
  auto stripped = [&](char32_t cp) {
    if (!chars || chars->is_nullish()) return is_js_space(cp);
    std::string one;
    utf8_append(one, cp);
    return chars->text.bytes.find(one) != std::string::npos;
  };
  if (chars && !chars->is_nullish() && !chars->is(K::kString)) runtime_error("strip() takes a string of characters");
  size_t begin = 0, end = s.size();
  while (left && begin < end) {
    size_t p = begin;
    if (!stripped(utf8_next(s, p))) break;
    begin = p;
  }
  while (right && end > begin) {
    size_t p = end - 1;
    while (p > begin && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
    size_t q = p;
    if (!stripped(utf8_next(s, q))) break;
    end = p;
  }
  return t.sub(begin, end - begin);
}

Text title_case(const Text& t) {
  std::string s = t.bytes;
  for (size_t i = 0; i < s.size(); ++i)
    if (is_ascii_word(s[i]) && (i == 0 || !is_ascii_word(s[i - 1])) && s[i] >= 'a' && s[i] <= 'z') s[i] -= 32;
  return remapped(t, s);
}

Text capitalize(const Text& t) {
  if (t.bytes.empty()) return t;
  size_t p = 0;
  utf8_next(t.bytes, p);
  Text out = remapped(t.sub(0, p), to_upper(t.bytes.substr(0, p)));
  out.append(t.sub(p, std::string::npos));
  return out;
}

Value split(const Text& t, const Value* sep_v, const Value* max_v) {
  const int64_t maxsplit = max_v && max_v->is(K::kInt) ? max_v->integer : -1;
  const std::string& s = t.bytes;
  Array parts;
  if (!sep_v || sep_v->is_nullish()) {
    size_t pos = 0;
    auto skip_space = [&](size_t p) {
      while (p < s.size()) {
        size_t q = p;
        if (!is_js_space(utf8_next(s, q))) break;
        p = q;
      }
      return p;
    };
    pos = skip_space(0);
    while (pos < s.size()) {
      if (maxsplit != -1 && int64_t(parts.size()) >= maxsplit) {
        parts.push_back(Value::of(t.sub(pos, std::string::npos)));
        break;
      }
      size_t end = pos;
      while (end < s.size()) {
        size_t q = end;
        if (is_js_space(utf8_next(s, q))) break;
        end = q;
      }
      parts.push_back(Value::of(t.sub(pos, end - pos)));
      pos = skip_space(end);
    }
    return Value::of(std::move(parts));
  }
  if (!sep_v->is(K::kString)) runtime_error("split() separator must be a string or none");
  const std::string& sep = sep_v->text.bytes;
  if (sep.empty()) runtime_error("split(): empty separator");
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(sep, pos);
    if (hit == std::string::npos || (maxsplit != -1 && int64_t(parts.size()) >= maxsplit)) {
      parts.push_back(Value::of(t.sub(pos, std::string::npos)));
      break;
    }
    parts.push_back(Value::of(t.sub(pos, hit - pos)));
    pos = hit + sep.size();
  }
  return Value::of(std::move(parts));
}

Value replace(const Text& t, const Value& old_v, const Value& new_v, const Value* count_v) {
  if (!old_v.is(K::kString) || !new_v.is(K::kString)) runtime_error("replace() arguments must be strings");
  int64_t remaining = count_v && count_v->is(K::kInt) && count_v->integer >= 0 ? count_v->integer : INT64_MAX;
  const std::string& s = t.bytes;
  const std::string& old = old_v.text.bytes;
  Text out;
  size_t pos = 0;
  if (old.empty()) {  // between every code point, and at both ends
    while (true) {
      if (remaining-- > 0) out.append(new_v.text);
      if (pos >= s.size()) break;
      size_t q = pos;
      utf8_next(s, q);
      out.append(t.sub(pos, q - pos));
      pos = q;
    }
    return Value::of(std::move(out));
  }
  while (remaining > 0) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(t.sub(pos, hit - pos));
    out.append(new_v.text);
    pos = hit + old.size();
    --remaining;
  }
  out.append(t.sub(pos, std::string::npos));
  return Value::of(std::move(out));
}

bool starts_or_ends(const std::string& s, const Value& pattern, bool starts) {
  auto one = [&](const Value& p) {
    if (!p.is(K::kString)) runtime_error("startswith()/endswith() take a string or a tuple of strings");
    const std::string& x = p.text.bytes;
    if (x.size() > s.size()) return false;
    return starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (pattern.is(K::kArray)) return std::any_of(pattern.array->begin(), pattern.array->end(), one);
  return one(pattern);
}

}  // namespace ts::tok::jinja
