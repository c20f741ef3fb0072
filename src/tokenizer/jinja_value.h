// Values of the chat-template interpreter (the Jinja subset of Hugging Face tokenizer_config.json templates,
// with the semantics of @huggingface/jinja, the engine transformers.js uses; see jinja.h).
//
// A string value remembers, byte by byte, whether it came from the caller's data (message contents, roles,
// tool-call arguments) or from the template itself (its text, literals, bos/eos tokens). The chat encoder lets
// special tokens match only in template bytes, so message contents cannot forge turn markers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::tok::jinja {

// UTF-8 text plus its provenance.
struct Text {
  std::string bytes;
  std::string from_input;  // "" when every byte is template text, else [bytes.size()] 0/1 per byte

  Text() = default;
  explicit Text(std::string s, bool input = false);
  bool input_at(size_t i) const { return !from_input.empty() && from_input[i] != 0; }
  bool any_input() const;
  void append(const Text& other);
  void append_template(const std::string& s);  // template-made bytes (conversions, separators)
  Text sub(size_t pos, size_t len) const;      // bytes [pos, pos+len)
};

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // keys in insertion order, as JavaScript Maps keep them

// Call arguments: positional, then keyword ones (name=value).
struct Args {
  std::vector<Value> pos;
  Object kw;
  const Value* kwarg(const std::string& name) const;
};
struct Scope;
// A callable: built-ins, bound methods ("abc".upper), macros. `caller` is the scope of the call site.
using Function = std::function<Value(Args& args, Scope& caller)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  Text text;
  std::shared_ptr<Array> array;    // kArray (shared: JavaScript reference semantics)
  std::shared_ptr<Object> object;  // kObject, kNamespace (a namespace is mutable through `set ns.x = ...`)
  std::shared_ptr<Function> function;

  static Value none();
  static Value of(bool b);
  static Value of_int(int64_t i);
  static Value of_float(double d);
  static Value of(Text t);
  static Value of_string(const std::string& s);  // template text
  static Value of(Array a);
  static Value of(Object o, Kind kind = Kind::kObject);
  static Value of(Function f);

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_nullish() const { return kind == Kind::kUndefined || kind == Kind::kNone; }
  bool is_mapping() const { return kind == Kind::kObject || kind == Kind::kNamespace; }
  const char* type_name() const;
};

const Value* find_key(const Object& o, const std::string& key);
// A mapping key as a string value, marked as caller data: keys mostly come from the caller (tool-call arguments),
// and a key the template wrote itself never holds special-token text.
Value key_value(const std::string& key);
void set_key(Object& o, const std::string& key, Value v);

bool truthy(const Value& v);
// What `{{ v }}` prints (@huggingface/jinja's toString: true -> "true", 2.0 -> "2.0", lists as JSON).
Text to_text(const Value& v);
// What string concatenation (`~`, `+`) uses: JavaScript's value toString (2.0 -> "2").
Text concat_text(const Value& v);
// JavaScript Number.prototype.toString.
std::string js_number(double d);

struct JsonOptions {
  int indent = 0;  // 0: single line
  bool ensure_ascii = false, sort_keys = false;
  std::string item_separator, key_separator;  // "" = defaults (", " / ": ", or "," with an indent)
};
std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null = true, int depth = 0);

bool loose_equal(const Value& a, const Value& b);   // `==` (JavaScript ==)
bool strict_equal(const Value& a, const Value& b);  // `in` on lists, `equalto`, `unique` (JavaScript ===)

// Caller data: every string in it is marked as input.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace ts::tok::jinja
