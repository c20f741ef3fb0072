// A renderer for the Jinja subset that Hugging Face chat templates (tokenizer_config.json "chat_template") use,
// with the semantics of @huggingface/jinja (the engine of transformers.js), against which the tests compare
// renderings byte for byte: for (loop.index0/first/last/length, else, `if` filter), if/elif/else, set (tuples,
// namespace(), ns.attr =, block set), macros, filter blocks, break/continue, comments; expressions with
// comparison, in / not in, not/and/or, ~ + - * / // % **, ternaries, slicing (messages[1:], s[::-1]); filters
// (trim, tojson, length, lower, upper, default, items, join, capitalize, title, first, last, string, int, float,
// abs, list, reverse, sort, unique, indent, replace, map, selectattr/rejectattr, safe, dictsort, keys/values);
// tests (defined, undefined, none, string, number, integer, boolean, mapping, iterable, sequence, callable,
// true, false, odd, even, lower, upper, equalto/eq); string methods (startswith, endswith, strip, lstrip,
// rstrip, split, replace, upper, lower, title, capitalize); globals raise_exception, range, namespace,
// strftime_now, true/false/none and their Python spellings.
//
// Deliberate differences from @huggingface/jinja 0.5.11, where it departs from Python's Jinja (what
// transformers renders with, so what models were trained on):
//   - strip/lstrip/rstrip with an argument remove only those characters (Qwen3's content.lstrip('\n')); the
//     reference ignores the argument and strips all white space;
//   - string length and indexing count code points, not UTF-16 units (they differ only past U+FFFF).
//
// Errors (syntax, unknown filter, raise_exception) are ts::Error with a message that says what failed.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/jinja_value.h"

namespace ts::tok::jinja {

struct Node;

class Template {
 public:
  explicit Template(const std::string& source);  // lexes and parses; throws ts::Error on a syntax error
  // Renders with the given variables (on top of the globals). The result's bytes carry their provenance.
  Text render(const Object& variables) const;

 private:
  std::shared_ptr<const Node> program_;
};

}  // namespace ts::tok::jinja
