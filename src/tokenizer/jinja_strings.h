// String operations of the chat-template interpreter (Python's str methods as @huggingface/jinja implements them,
// with the deliberate differences listed in jinja.h). Each result keeps the provenance of the bytes it copies.
#pragma once

#include <string>

#include "tokenizer/jinja_value.h"

namespace ts::tok::jinja {

// A transformed string keeps its provenance when the bytes line up, else it is input if any part was.
Text remapped(const Text& from, std::string bytes);
size_t code_points(const std::string& s);
// White space (JavaScript trim) or, with a string `chars`, those code points (Python's strip(chars)).
Text strip(const Text& t, bool left, bool right, const Value* chars);
Text title_case(const Text& t);   // /\b\w/ upper-cased, the rest unchanged (the reference's title)
Text capitalize(const Text& t);   // first code point upper-cased, the rest unchanged
Value split(const Text& t, const Value* sep, const Value* maxsplit);  // Python's str.split
Value replace(const Text& t, const Value& old_v, const Value& new_v, const Value* count);
bool starts_or_ends(const std::string& s, const Value& pattern, bool starts);  // a string or a tuple of strings

}  // namespace ts::tok::jinja
