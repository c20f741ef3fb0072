#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace ts::tok::jinja {

// ---- Text ----

Text::Text(std::string s, bool input) : bytes(std::move(s)) {
  if (input && !bytes.empty()) from_input.assign(bytes.size(), 1);
}

bool Text::any_input() const { return from_input.find('\1') != std::string::npos; }

void Text::append(const Text& other) {
  if (other.bytes.empty()) return;
  if (from_input.empty() && other.from_input.empty()) {
    bytes += other.bytes;
    return;
  }
  if (from_input.empty()) from_input.assign(bytes.size(), 0);
  bytes += other.bytes;
  if (other.from_input.empty()) from_input.append(other.bytes.size(), 0);
  else from_input += other.from_input;
}

void Text::append_template(const std::string& s) { append(Text(s)); }

Text Text::sub(size_t pos, size_t len) const {
  Text t;
  t.bytes = bytes.substr(pos, len);
  if (!from_input.empty()) {
    t.from_input = from_input.substr(pos, len);
    if (!t.any_input()) t.from_input.clear();
  }
  return t;
}

// ---- Value ----

const Value* Args::kwarg(const std::string& name) const { return find_key(kw, name); }

Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::of(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}
Value Value::of_int(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.integer = i;
  return v;
}
Value Value::of_float(double d) {
  Value v;
  v.kind = Kind::kFloat;
  v.real = d;
  return v;
}
Value Value::of(Text t) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(t);
  return v;
}
Value Value::of_string(const std::string& s) { return of(Text(s)); }
Value Value::of(Array a) {
  Value v;
  v.kind = Kind::kArray;
  v.array = std::make_shared<Array>(std::move(a));
  return v;
}
Value Value::of(Object o, Kind kind) {
  Value v;
  v.kind = kind;
  v.object = std::make_shared<Object>(std::move(o));
  return v;
}
Value Value::of(Function f) {
  Value v;
  v.kind = Kind::kFunction;
  v.function = std::make_shared<Function>(std::move(f));
  return v;
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "mapping";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

const Value* find_key(const Object& o, const std::string& key) {
  for (const auto& [k, v] : o)
    if (k == key) return &v;
  return nullptr;
}

Value key_value(const std::string& key) { return Value::of(Text(key, /*input=*/true)); }

void set_key(Object& o, const std::string& key, Value v) {
  for (auto& [k, old] : o)
    if (k == key) {
      old = std::move(v);
      return;
    }
  o.emplace_back(key, std::move(v));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.boolean;
    case Value::Kind::kInt: return v.integer != 0;
    case Value::Kind::kFloat: return v.real != 0 && !std::isnan(v.real);
    case Value::Kind::kString: return !v.text.bytes.empty();
    case Value::Kind::kArray: return !v.array->empty();
    case Value::Kind::kObject: return !v.object->empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction: return true;
  }
  return false;
}

// ---- numbers and JSON ----

std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  std::string sign = d < 0 ? "-" : "";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // shortest round trip: "d.ddde+XX"
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int k = int(digits.size());
  const int n = std::atoi(sci.c_str() + e_pos + 1) + 1;  // decimal point position (ECMAScript Number::toString)
  if (k <= n && n <= 21) return sign + digits + std::string(n - k, '0');
  if (0 < n && n <= 21) return sign + digits.substr(0, n) + "." + digits.substr(n);
  if (-6 < n && n <= 0) return sign + "0." + std::string(-n, '0') + digits;
  std::string exp = (n - 1 >= 0 ? "+" : "-") + std::to_string(std::abs(n - 1));
  return sign + digits.substr(0, 1) + (k > 1 ? "." + digits.substr(1) : "") + "e" + exp;
}

namespace {

// @huggingface/jinja's FloatValue.toString: integral values keep one decimal (toFixed(1)).
std::string float_text(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 1e21) {
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  return js_number(d);
}

void append_hex4(std::string& out, unsigned u) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", u & 0xFFFF);
  out += buf;
}

// JSON.stringify of a string (non-ASCII kept unless ensure_ascii, then \uXXXX per UTF-16 unit).
std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  size_t pos = 0;
  while (pos < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      ++pos;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) append_hex4(out, c);
          else out += char(c);
      }
      continue;
    }
    const size_t start = pos;
    const char32_t cp = utf8_next(s, pos);
    if (!ensure_ascii) {
      out.append(s, start, pos - start);
    } else if (cp >= 0x10000) {
      append_hex4(out, 0xD800 + ((cp - 0x10000) >> 10));
      append_hex4(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      append_hex4(out, cp);
    }
  }
  return out + "\"";
}

bool contains_input(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return v.text.any_input();
    case Value::Kind::kArray:
      return std::any_of(v.array->begin(), v.array->end(), [](const Value& x) { return contains_input(x); });
    case Value::Kind::kObject:
    case Value::Kind::kNamespace:
      return std::any_of(v.object->begin(), v.object->end(), [](const auto& kv) { return contains_input(kv.second); });
    default: return false;
  }
}

// JavaScript ToNumber on a string (for ==).
double js_to_number(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return 0;
  std::string t = s.substr(b, e - b + 1);
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() ? d : std::nan("");
}

double number_of(const Value& v) {
  if (v.kind == Value::Kind::kInt) return double(v.integer);
  if (v.kind == Value::Kind::kFloat) return v.real;
  if (v.kind == Value::Kind::kBool) return v.boolean ? 1 : 0;
  return js_to_number(v.text.bytes);
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null, int depth) {
  const std::string item_sep = !options.item_separator.empty() ? options.item_separator
                               : options.indent                ? ","
                                                               : ", ";
  const std::string key_sep = !options.key_separator.empty() ? options.key_separator : ": ";
  switch (v.kind) {
    case Value::Kind::kNone: return "null";
    case Value::Kind::kUndefined: return undefined_as_null ? "null" : "undefined";
    case Value::Kind::kBool: return v.boolean ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(v.integer);
    case Value::Kind::kFloat: return std::isfinite(v.real) ? js_number(v.real) : "null";
    case Value::Kind::kString: return json_string(v.text.bytes, options.ensure_ascii);
    case Value::Kind::kArray:
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: {
      const std::string unit(options.indent, ' ');
      std::string base = "\n", child = "\n";
      for (int i = 0; i < depth; ++i) base += unit;
      child = base + unit;
      std::vector<std::string> parts;
      if (v.kind == Value::Kind::kArray) {
        for (const Value& x : *v.array) parts.push_back(to_json(x, options, undefined_as_null, depth + 1));
      } else {
        Object entries = *v.object;
        if (options.sort_keys)
          std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [key, x] : entries)
          parts.push_back(json_string(key, options.ensure_ascii) + key_sep +
                          to_json(x, options, undefined_as_null, depth + 1));
      }
      const char open = v.kind == Value::Kind::kArray ? '[' : '{', close = open == '[' ? ']' : '}';
      std::string out(1, open);
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i) out += item_sep;
        if (options.indent) out += child;
        out += parts[i];
      }
      if (options.indent && !parts.empty()) out += base;
      return out + close;
    }
    case Value::Kind::kFunction: break;
  }
  TS_FAIL("chat template: cannot convert a ", v.type_name(), " to JSON");
}

Text to_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return v.text;
    case Value::Kind::kFloat: return Text(float_text(v.real));
    case Value::Kind::kArray:
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: return Text(to_json(v, {}, /*undefined_as_null=*/false), contains_input(v));
    default: return concat_text(v);
  }
}

Text concat_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return Text("undefined");
    case Value::Kind::kNone: return Text("null");
    case Value::Kind::kBool: return Text(v.boolean ? "true" : "false");
    case Value::Kind::kInt: return Text(std::to_string(v.integer));
    case Value::Kind::kFloat: return Text(js_number(v.real));
    case Value::Kind::kString: return v.text;
    case Value::Kind::kFunction: return Text("function");
    default: return to_text(v);
  }
}

bool loose_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_nullish() || b.is_nullish()) return a.is_nullish() && b.is_nullish();
  if (a.kind == K::kString && b.kind == K::kString) return a.text.bytes == b.text.bytes;
  const bool a_prim = a.is_number() || a.kind == K::kBool || a.kind == K::kString;
  const bool b_prim = b.is_number() || b.kind == K::kBool || b.kind == K::kString;
  if (a_prim && b_prim) {
    if (a.kind == K::kInt && b.kind == K::kInt) return a.integer == b.integer;
    return number_of(a) == number_of(b);
  }
  if (a.kind != b.kind) return false;
  if (a.kind == K::kArray) return a.array == b.array;
  if (a.kind == K::kFunction) return a.function == b.function;
  return a.object == b.object;
}

bool strict_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) return loose_equal(a, b);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kBool: return a.boolean == b.boolean;
    case K::kString: return a.text.bytes == b.text.bytes;
    default: return loose_equal(a, b);
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::of_int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = j.get<double>();  // JavaScript has one number type: 1.0 is the integer 1
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) return Value::of_int(int64_t(d));
      return Value::of_float(d);
    }
    case nlohmann::ordered_json::value_t::string: return Value::of(Text(j.get<std::string>(), /*input=*/true));
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& x : j) a.push_back(from_json(x));
      return Value::of(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (const auto& [k, x] : j.items()) o.emplace_back(k, from_json(x));
      return Value::of(std::move(o));
    }
    default: TS_FAIL("chat template: unsupported JSON value ", j.dump());
  }
}

}  // namespace ts::tok::jinja
