#include "tokenizer/jinja_lexer.h"

#include <cstdlib>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace ts::tok::jinja {

bool is_js_space(char32_t c) {
  return c == '\t' || c == '\n' || c == 0x0B || c == 0x0C || c == '\r' || c == ' ' || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000 || c == 0xFEFF;
}

namespace {

// Code point at s[pos] without validation beyond what utf8_next does (the template is checked UTF-8).
char32_t cp_at(const std::string& s, size_t pos, size_t* next = nullptr) {
  size_t p = pos;
  char32_t c = utf8_next(s, p);
  if (next) *next = p;
  return c;
}

size_t prev_start(const std::string& s, size_t pos) {  // start of the code point ending at pos
  size_t p = pos - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

size_t skip_js_space(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    size_t next;
    if (!is_js_space(cp_at(s, pos, &next))) break;
    pos = next;
  }
  return pos;
}

// {%-? \s* (end)?generation \s* -?%} at s[q]: sets the end and the two strip flags.
bool generation_tag(const std::string& s, size_t q, size_t* end, bool* lstrip, bool* rstrip) {
  if (s.compare(q, 2, "{%") != 0) return false;
  size_t p = q + 2;
  *lstrip = p < s.size() && s[p] == '-';
  if (*lstrip) ++p;
  p = skip_js_space(s, p);
  if (s.compare(p, 3, "end") == 0 && s.compare(p + 3, 10, "generation") == 0) p += 3;
  if (s.compare(p, 10, "generation") != 0) return false;
  p = skip_js_space(s, p + 10);
  *rstrip = p < s.size() && s[p] == '-';
  if (*rstrip) ++p;
  if (s.compare(p, 2, "%}") != 0) return false;
  *end = p + 2;
  return true;
}

}  // namespace

std::string js_trim_start(const std::string& s) { return s.substr(skip_js_space(s, 0)); }

std::string js_trim_end(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t p = prev_start(s, end);
    if (!is_js_space(cp_at(s, p))) break;
    end = p;
  }
  return s.substr(0, end);
}

std::string preprocess(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  // lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1"
  std::string a;
  bool line_start = true;
  for (size_t i = 0; i < s.size();) {
    if (line_start) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) i = j;
      line_start = false;
      if (i >= s.size()) break;
    }
    const char c = s[i];
    a += c;
    ++i;
    // JavaScript's multiline ^ follows \n, \r, U+2028 and U+2029 (E2 80 A8 / E2 80 A9).
    if (c == '\n' || c == '\r') line_start = true;
    if (static_cast<unsigned char>(c) == 0xA8 || static_cast<unsigned char>(c) == 0xA9)
      line_start = a.size() >= 3 && static_cast<unsigned char>(a[a.size() - 3]) == 0xE2 &&
                   static_cast<unsigned char>(a[a.size() - 2]) == 0x80;
  }
  // trim_blocks: /([#%-]})\n/g -> "$1"
  std::string b;
  for (size_t i = 0; i < a.size();) {
    if ((a[i] == '#' || a[i] == '%' || a[i] == '-') && a.compare(i + 1, 2, "}\n") == 0) {
      b.append(a, i, 2);
      i += 3;
    } else {
      b += a[i++];
    }
  }
  // /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" : after)
  std::string out;
  size_t copied = 0;
  for (size_t q = 0; q < b.size(); ++q) {
    size_t end;
    bool lstrip, rstrip;
    if (b[q] != '{' || !generation_tag(b, q, &end, &lstrip, &rstrip)) continue;
    size_t p = q;
    while (p > copied && is_js_space(cp_at(b, prev_start(b, p)))) p = prev_start(b, p);
    out.append(b, copied, p - copied);
    const size_t after_end = skip_js_space(b, end);
    if (!lstrip) out.append(b, p, q - p);
    if (!rstrip) out.append(b, end, after_end - end);
    copied = after_end;
    q = after_end - 1;
  }
  out.append(b, copied, std::string::npos);
  return out;
}

namespace {

struct Lexer {
  const std::string& src;
  std::vector<Token> tokens;
  size_t cur = 0;

  [[noreturn]] void fail(const std::string& what) const {
    TS_FAIL("chat template syntax error at byte ", cur, " (after preprocessing): ", what);
  }
  bool at(std::string_view s) const { return src.compare(cur, s.size(), s) == 0; }
  void push(TokenType type, std::string value, size_t offset) { tokens.push_back({type, std::move(value), offset}); }
  TokenType last_type(bool* none) const {
    *none = tokens.empty();
    return tokens.empty() ? TokenType::kText : tokens.back().type;
  }

  // consumeWhile: escapes are resolved; running into the end of the input is an error.
  template <typename Pred>
  std::string consume_while(Pred pred) {
    std::string out;
    while (cur < src.size() && pred(src, cur)) {
      if (src[cur] == '\\') {
        ++cur;
        if (cur >= src.size()) fail("unexpected end of input");
        const char e = src[cur++];
        if (e == 'x' || e == 'u') {
          const size_t len = e == 'x' ? 2 : 4;
          const std::string hex = src.substr(cur, len);
          if (hex.size() != len || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            fail("invalid hexadecimal escape sequence \\" + std::string(1, e) + hex);
          char32_t cp = char32_t(std::strtoul(hex.c_str(), nullptr, 16));
          cur += len;
          // A UTF-16 surrogate pair written as two \u escapes is one code point.
          if (cp >= 0xD800 && cp < 0xDC00 && src.compare(cur, 2, "\\u") == 0) {
            const std::string low = src.substr(cur + 2, 4);
            const char32_t lo = char32_t(std::strtoul(low.c_str(), nullptr, 16));
            if (low.size() == 4 && lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              cur += 6;
            }
          }
          utf8_append(out, cp);
          continue;
        }
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'v': out += '\v'; break;
          case '\'': out += '\''; break;
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          default: fail(std::string("unexpected escaped character: ") + e);
        }
        continue;
      }
      size_t next;
      cp_at(src, cur, &next);
      out.append(src, cur, next - cur);
      cur = next;
      if (cur >= src.size()) fail("unexpected end of input");
    }
    return out;
  }

  static bool digit(const std::string& s, size_t p) { return p < s.size() && s[p] >= '0' && s[p] <= '9'; }
  static bool word(const std::string& s, size_t p) {
    const char c = s[p];
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static bool space(const std::string& s, size_t p) { return is_js_space(cp_at(s, p)); }

  void strip_trailing_whitespace() {
    if (!tokens.empty() && tokens.back().type == TokenType::kText) {
      tokens.back().value = js_trim_end(tokens.back().value);
      if (tokens.back().value.empty()) tokens.pop_back();
    }
  }
  void skip_leading_whitespace() { cur = skip_js_space(src, cur); }

  void run();
  bool lex_text();
  void lex_comment();
  bool lex_open_with_strip();
  bool lex_close_with_strip();
  bool lex_signed_number();
  bool lex_fixed();
  bool lex_string();
  bool lex_number();
  bool lex_identifier();

  int curly_depth = 0;  // open `{` inside the current expression: a `}}` there closes two mappings, not the tag
};

struct Fixed {
  const char* seq;
  TokenType type;
};
const Fixed kTable[] = {
    {"{%", TokenType::kOpenStatement}, {"%}", TokenType::kCloseStatement}, {"{{", TokenType::kOpenExpression},
    {"}}", TokenType::kCloseExpression}, {"(", TokenType::kOpenParen}, {")", TokenType::kCloseParen},
    {"{", TokenType::kOpenCurly}, {"}", TokenType::kCloseCurly}, {"[", TokenType::kOpenBracket},
    {"]", TokenType::kCloseBracket}, {",", TokenType::kComma}, {".", TokenType::kDot}, {":", TokenType::kColon},
    {"|", TokenType::kPipe}, {"<=", TokenType::kComparison}, {">=", TokenType::kComparison},
    {"==", TokenType::kComparison}, {"!=", TokenType::kComparison}, {"<", TokenType::kComparison},
    {">", TokenType::kComparison}, {"+", TokenType::kAdditive}, {"-", TokenType::kAdditive},
    {"~", TokenType::kAdditive}, {"**", TokenType::kPower}, {"*", TokenType::kMultiplicative},
    {"//", TokenType::kMultiplicative}, {"/", TokenType::kMultiplicative}, {"%", TokenType::kMultiplicative},
    {"=", TokenType::kEquals},
};

// Each lex_* step reads one token at `cur` and returns true, or returns false and leaves `cur` where it was.

// Text up to the next "{%", "{{" or "{#"; false when a tag starts right here.
bool Lexer::lex_text() {
  const size_t start = cur;
  while (cur < src.size() &&
         !(src[cur] == '{' && cur + 1 < src.size() && (src[cur + 1] == '%' || src[cur + 1] == '{' || src[cur + 1] == '#')))
    ++cur;
  if (cur == start) return false;
  push(TokenType::kText, src.substr(start, cur - start), start);
  return true;
}

// A comment "{# ... #}" at `cur`, with "{#-" / "-#}" stripping the whitespace before / after it.
void Lexer::lex_comment() {
  const size_t start = cur;
  cur += 2;
  const bool strip_before = cur < src.size() && src[cur] == '-';
  if (strip_before) ++cur;
  std::string comment;
  while (!(cur + 1 < src.size() && src[cur] == '#' && src[cur + 1] == '}')) {
    if (cur + 2 >= src.size()) fail("missing end of comment tag");
    comment += src[cur++];
  }
  const bool strip_after = !comment.empty() && comment.back() == '-';
  if (strip_after) comment.pop_back();
  if (strip_before) strip_trailing_whitespace();
  push(TokenType::kComment, comment, start);
  cur += 2;
  if (strip_after) skip_leading_whitespace();
}

// "{%-" or "{{-": the tag, with the whitespace before it stripped.
bool Lexer::lex_open_with_strip() {
  if (at("{%-")) {
    strip_trailing_whitespace();
    push(TokenType::kOpenStatement, "{%", cur);
    cur += 3;
    return true;
  }
  if (at("{{-")) {
    strip_trailing_whitespace();
    push(TokenType::kOpenExpression, "{{", cur);
    curly_depth = 0;
    cur += 3;
    return true;
  }
  return false;
}

// "-%}" or "-}}": the tag, with the whitespace after it skipped.
bool Lexer::lex_close_with_strip() {
  if (at("-%}")) {
    push(TokenType::kCloseStatement, "%}", cur);
    cur += 3;
    skip_leading_whitespace();
    return true;
  }
  if (at("-}}")) {
    push(TokenType::kCloseExpression, "}}", cur);
    cur += 3;
    skip_leading_whitespace();
    return true;
  }
  return false;
}

// A '-' or '+' where no operand precedes it: a signed number, or a unary operator when no digits follow.
bool Lexer::lex_signed_number() {
  const char c = src[cur];
  const size_t start = cur;
  if (c != '-' && c != '+') return false;
  bool none;
  const TokenType last = last_type(&none);
  if (none || last == TokenType::kText) fail(std::string("unexpected character: ") + c);
  if (last == TokenType::kIdentifier || last == TokenType::kNumber || last == TokenType::kString ||
      last == TokenType::kCloseParen || last == TokenType::kCloseBracket)
    return false;  // a binary operator, read from kTable
  ++cur;
  std::string num = consume_while(digit);
  if (!num.empty() && cur < src.size() && src[cur] == '.' && digit(src, cur + 1)) {
    ++cur;
    num += "." + consume_while(digit);
  }
  push(num.empty() ? TokenType::kUnary : TokenType::kNumber, std::string(1, c) + num, start);
  return true;
}

// The first kTable sequence at `cur` ("}}" is not a tag end while a `{` is open in the expression).
bool Lexer::lex_fixed() {
  const size_t start = cur;
  for (const Fixed& f : kTable) {
    if (f.type == TokenType::kCloseExpression && curly_depth > 0) continue;
    if (!at(f.seq)) continue;
    push(f.type, f.seq, start);
    if (f.type == TokenType::kOpenExpression) curly_depth = 0;
    else if (f.type == TokenType::kOpenCurly) ++curly_depth;
    else if (f.type == TokenType::kCloseCurly) --curly_depth;
    cur += std::char_traits<char>::length(f.seq);
    return true;
  }
  return false;
}

// A string literal in '...' or "...", escapes resolved.
bool Lexer::lex_string() {
  const char c = src[cur];
  const size_t start = cur;
  if (c != '\'' && c != '"') return false;
  ++cur;
  std::string s = consume_while([c](const std::string& t, size_t p) { return t[p] != c; });
  push(TokenType::kString, std::move(s), start);
  ++cur;
  return true;
}

// Digits, with a fraction unless the number follows a '.' (`x.0.1` is an index path, not 0.1).
bool Lexer::lex_number() {
  const size_t start = cur;
  if (!digit(src, cur)) return false;
  std::string num = consume_while(digit);
  if ((tokens.empty() || tokens.back().type != TokenType::kDot) && cur < src.size() && src[cur] == '.' &&
      digit(src, cur + 1)) {
    ++cur;
    num += "." + consume_while(digit);
  }
  push(TokenType::kNumber, std::move(num), start);
  return true;
}

bool Lexer::lex_identifier() {
  const size_t start = cur;
  if (!word(src, cur)) return false;
  push(TokenType::kIdentifier, consume_while(word), start);
  return true;
}

void Lexer::run() {
  while (cur < src.size()) {
    bool none;
    const TokenType last = last_type(&none);
    const bool after_tag = none || last == TokenType::kCloseStatement || last == TokenType::kCloseExpression ||
                           last == TokenType::kComment;
    if (after_tag && lex_text()) continue;
    if (at("{#")) {
      lex_comment();
      continue;
    }
    if (lex_open_with_strip()) continue;
    consume_while(space);
    if (lex_close_with_strip() || lex_signed_number() || lex_fixed() || lex_string() || lex_number() ||
        lex_identifier())
      continue;
    fail(std::string("unexpected character: ") + src[cur]);
  }
}

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  check_utf8(source, "chat template");
  const std::string src = preprocess(source);
  Lexer lexer{src, {}};
  lexer.run();
  return std::move(lexer.tokens);
}

}  // namespace ts::tok::jinja
