// UTF-8 and Unicode helpers the tokenizer needs: validation, lossy decoding (U+FFFD the way WHATWG's TextDecoder
// does it, which is what the reference tokenizers produce), normalization forms (ICU), white space, and GPT-2's
// byte <-> printable-character map used by byte-level BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ts::tok {

// Throws ts::Error naming the byte offset of the first invalid UTF-8 sequence in `text`, if any. `what` names the
// input in the message ("text to encode").
void check_utf8(std::string_view text, const char* what);

// Bytes -> valid UTF-8: each maximal invalid subpart becomes U+FFFD (WHATWG "replacement" decoding).
std::string utf8_lossy(std::string_view bytes);

// Length of the trailing bytes of `bytes` that form a valid but incomplete UTF-8 sequence (0..3): the part a
// streaming decoder must hold back until the next bytes arrive.
size_t utf8_incomplete_tail(std::string_view bytes);

// Decodes the code point starting at text[pos] (text must be valid UTF-8) and advances pos.
char32_t utf8_next(std::string_view text, size_t& pos);
void utf8_append(std::string& out, char32_t cp);

// Unicode White_Space (what Rust's char::is_whitespace tests; used for added tokens' lstrip/rstrip).
bool is_unicode_space(char32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// Normalizes valid UTF-8 text. Returns the input unchanged (no allocation beyond the copy) when it is already
// normalized, which is the common case.
std::string normalize(std::string_view text, NormalForm form);
std::string to_lower(std::string_view text);  // full Unicode lowercase, root locale
std::string to_upper(std::string_view text);  // full Unicode uppercase, root locale

// GPT-2 byte-level alphabet: every byte maps to one printable code point so that BPE vocabularies hold text.
struct ByteLevelAlphabet {
  char32_t byte_to_char[256];  // [256] code point standing for each byte
  // Inverse: code point -> byte, or -1. The mapped code points are all < 324.
  int16_t char_to_byte[324];
  static const ByteLevelAlphabet& get();
};

}  // namespace ts::tok
