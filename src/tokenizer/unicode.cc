#include "tokenizer/unicode.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utypes.h>

#include <vector>

#include "core/error.h"

namespace ts::tok {

namespace {

// Length of the UTF-8 sequence at s[i] if it is valid, else 0. Follows the Unicode table of well-formed byte
// sequences (no overlongs, no surrogates, nothing above U+10FFFF).
size_t valid_sequence_length(const unsigned char* s, size_t n, size_t i) {
  unsigned char b = s[i];
  if (b < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > n) return 0;
  if (s[i + 1] < lo || s[i + 1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((s[i + k] & 0xC0) != 0x80) return 0;
  return len;
}

// Number of bytes starting at s[i] that form the longest valid prefix of some UTF-8 sequence ("maximal subpart"),
// at least 1. Used to decide how many bytes one U+FFFD replaces.
size_t maximal_subpart(const unsigned char* s, size_t n, size_t i) {
  unsigned char b = s[i];
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) len = 2;
  else if (b >= 0xE0 && b <= 0xEF) { len = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
  else if (b >= 0xF0 && b <= 0xF4) { len = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
  else return 1;
  size_t k = 1;
  if (i + k < n && s[i + k] >= lo && s[i + k] <= hi) {
    ++k;
    while (k < len && i + k < n && (s[i + k] & 0xC0) == 0x80) ++k;
  }
  return k;
}

}  // namespace

void check_utf8(std::string_view text, const char* what) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    if (s[i] < 0x80) { ++i; continue; }
    size_t len = valid_sequence_length(s, n, i);
    TS_CHECK(len != 0, what, " is not valid UTF-8: invalid byte 0x", std::hex, int(s[i]), std::dec, " at offset ", i,
             " (expected UTF-8 text)");
    i += len;
  }
}

std::string utf8_lossy(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  size_t run_start = 0;  // start of the current run of valid bytes, copied in one go
  for (size_t i = 0; i < n;) {
    if (s[i] < 0x80) { ++i; continue; }
    size_t len = valid_sequence_length(s, n, i);
    if (len) { i += len; continue; }
    out.append(bytes.data() + run_start, i - run_start);
    out += "\xEF\xBF\xBD";
    i += maximal_subpart(s, n, i);
    run_start = i;
  }
  out.append(bytes.data() + run_start, n - run_start);
  return out;
}

size_t utf8_incomplete_tail(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  // The tail starts at the last non-continuation byte among the last 3 bytes.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    if ((s[i] & 0xC0) == 0x80) continue;
    // A valid prefix shorter than its sequence means the sequence is still incomplete.
    if (s[i] < 0xC2 || s[i] > 0xF4) return 0;  // not a lead byte: nothing to wait for
    size_t need = s[i] >= 0xF0 ? 4 : s[i] >= 0xE0 ? 3 : 2;
    if (need > back && maximal_subpart(s, n, i) == back) return back;
    return 0;
  }
  return 0;
}

char32_t utf8_next(std::string_view text, size_t& pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  unsigned char b = s[pos];
  if (b < 0x80) { ++pos; return b; }
  if (b < 0xE0) { char32_t c = ((b & 0x1F) << 6) | (s[pos + 1] & 0x3F); pos += 2; return c; }
  if (b < 0xF0) {
    char32_t c = ((b & 0x0F) << 12) | ((s[pos + 1] & 0x3F) << 6) | (s[pos + 2] & 0x3F);
    pos += 3;
    return c;
  }
  char32_t c = ((b & 0x07) << 18) | ((s[pos + 1] & 0x3F) << 12) | ((s[pos + 2] & 0x3F) << 6) | (s[pos + 3] & 0x3F);
  pos += 4;
  return c;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

std::u16string to_utf16(std::string_view text) {
  std::u16string out(text.size(), u'\0');  // UTF-16 never needs more units than UTF-8 has bytes
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(out.data()), int32_t(out.size()), &len, text.data(), int32_t(text.size()),
                &err);
  TS_CHECK(U_SUCCESS(err), "UTF-8 -> UTF-16 conversion failed: ", u_errorName(err));
  out.resize(len);
  return out;
}

std::string to_utf8(const std::u16string& text) {
  std::string out(text.size() * 3, '\0');
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), int32_t(out.size()), &len, reinterpret_cast<const UChar*>(text.data()),
              int32_t(text.size()), &err);
  TS_CHECK(U_SUCCESS(err), "UTF-16 -> UTF-8 conversion failed: ", u_errorName(err));
  out.resize(len);
  return out;
}

const UNormalizer2* normalizer_for(NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::NFC: n = unorm2_getNFCInstance(&err); break;
    case NormalForm::NFD: n = unorm2_getNFDInstance(&err); break;
    case NormalForm::NFKC: n = unorm2_getNFKCInstance(&err); break;
    case NormalForm::NFKD: n = unorm2_getNFKDInstance(&err); break;
  }
  TS_CHECK(U_SUCCESS(err) && n, "ICU normalizer unavailable: ", u_errorName(err));
  return n;
}

}  // namespace

std::string normalize(std::string_view text, NormalForm form) {
  // Every code point below U+0300 (lead bytes < 0xCC) is stable under NFC and NFD; compatibility forms also
  // change a few Latin-1 characters (U+00A0, U+00AA, ...), so only the pure-ASCII shortcut holds for them.
  unsigned char limit = (form == NormalForm::NFC || form == NormalForm::NFD) ? 0xCC : 0x80;
  bool trivially_normal = true;
  for (unsigned char b : text) {
    if (b >= limit) { trivially_normal = false; break; }
  }
  if (trivially_normal) return std::string(text);

  const UNormalizer2* n = normalizer_for(form);
  std::u16string src = to_utf16(text);
  UErrorCode err = U_ZERO_ERROR;
  int32_t normal_prefix = unorm2_spanQuickCheckYes(n, reinterpret_cast<const UChar*>(src.data()),
                                                   int32_t(src.size()), &err);
  TS_CHECK(U_SUCCESS(err), "ICU quick check failed: ", u_errorName(err));
  if (normal_prefix == int32_t(src.size())) return std::string(text);

  std::u16string dst(src.size() * 2 + 16, u'\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    err = U_ZERO_ERROR;
    int32_t len = unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()), int32_t(src.size()),
                                   reinterpret_cast<UChar*>(dst.data()), int32_t(dst.size()), &err);
    if (err == U_BUFFER_OVERFLOW_ERROR) { dst.assign(len + 16, u'\0'); continue; }
    TS_CHECK(U_SUCCESS(err), "ICU normalization failed: ", u_errorName(err));
    dst.resize(len);
    return to_utf8(dst);
  }
  TS_FAIL("ICU normalization failed: output buffer kept overflowing");
}

namespace {

// Full Unicode case mapping (root locale) through ICU; ASCII text takes a fast path.
std::string change_case(std::string_view text, bool upper) {
  bool ascii = true;
  for (unsigned char b : text) ascii &= b < 0x80;
  if (ascii) {
    std::string out(text);
    for (char& c : out) {
      if (!upper && c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      if (upper && c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
    }
    return out;
  }
  std::u16string src = to_utf16(text);
  std::u16string dst(src.size() * 2 + 16, u'\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode err = U_ZERO_ERROR;
    auto* out = reinterpret_cast<UChar*>(dst.data());
    const auto* in = reinterpret_cast<const UChar*>(src.data());
    int32_t len = upper ? u_strToUpper(out, int32_t(dst.size()), in, int32_t(src.size()), "", &err)
                        : u_strToLower(out, int32_t(dst.size()), in, int32_t(src.size()), "", &err);
    if (err == U_BUFFER_OVERFLOW_ERROR) { dst.assign(len + 16, u'\0'); continue; }
    TS_CHECK(U_SUCCESS(err), "ICU case mapping failed: ", u_errorName(err));
    dst.resize(len);
    return to_utf8(dst);
  }
  TS_FAIL("ICU case mapping failed: output buffer kept overflowing");
}

}  // namespace

std::string to_lower(std::string_view text) { return change_case(text, false); }
std::string to_upper(std::string_view text) { return change_case(text, true); }

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a{};
    // Printable bytes stand for themselves; the rest (control, space, 0x7F-0xA0, 0xAD) take 256, 257, ... in order.
    auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
    int next = 256;
    for (int b = 0; b < 256; ++b) a.byte_to_char[b] = printable(b) ? char32_t(b) : char32_t(next++);
    for (auto& v : a.char_to_byte) v = -1;
    for (int b = 0; b < 256; ++b) a.char_to_byte[a.byte_to_char[b]] = int16_t(b);
    return a;
  }();
  return alphabet;
}

}  // namespace ts::tok
