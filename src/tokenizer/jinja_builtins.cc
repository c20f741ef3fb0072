// Built-ins of the chat-template interpreter: globals, filters, tests, and the methods of strings, lists and
// mappings, each as @huggingface/jinja defines it (deliberate differences are listed in jinja.h).
#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_strings.h"
#include "tokenizer/unicode.h"

namespace ts::tok::jinja {

namespace {

using K = Value::Kind;

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_nullish() || b.is_nullish()) {
    if (a.kind == b.kind) return 0;
    runtime_error(std::string("cannot compare ") + a.type_name() + " with " + b.type_name());
  }
  const bool an = a.is_number() || a.is(K::kBool), bn = b.is_number() || b.is(K::kBool);
  if (an && bn) {
    auto num = [](const Value& v) { return v.is(K::kInt) ? double(v.integer) : v.is(K::kFloat) ? v.real : double(v.boolean); };
    return num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
  }
  if (!a.is(K::kString) || !b.is(K::kString))
    runtime_error(std::string("cannot compare ") + a.type_name() + " with " + b.type_name());
  const std::string x = case_sensitive ? a.text.bytes : to_lower(a.text.bytes);
  const std::string y = case_sensitive ? b.text.bytes : to_lower(b.text.bytes);
  return x < y ? -1 : x > y ? 1 : 0;
}

// `attribute` paths as in map(attribute="a.b") and sort(attribute=...).
Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (v.is_mapping()) {
      const Value* x = find_key(*v.object, part);
      v = x ? *x : Value();
    } else if (v.is(K::kArray) && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = std::stoul(part);
      if (i >= v.array->size()) return Value();
      v = (*v.array)[i];
    } else {
      return Value();
    }
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return v;
}

Value items_of(const Value& o) {
  Array out;
  for (const auto& [k, v] : *o.object) out.push_back(Value::of(Array{key_value(k), v}));
  return Value::of(std::move(out));
}

const Value* arg(const Args& a, size_t i, const char* name) {
  if (i < a.pos.size()) return &a.pos[i];
  return name ? a.kwarg(name) : nullptr;
}

bool flag_arg(const Args& a, size_t i, const char* name, bool fallback) {
  const Value* v = arg(a, i, name);
  if (!v) return fallback;
  if (!v->is(K::kBool)) runtime_error(std::string(name) + " must be a boolean");
  return v->boolean;
}

Value parse_int_text(const std::string& s, const Value* fallback) {  // parseInt(s, 10)
  size_t p = 0;
  while (p < s.size() && is_js_space(static_cast<unsigned char>(s[p]))) ++p;
  size_t q = p;
  if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
  size_t d = q;
  while (d < s.size() && s[d] >= '0' && s[d] <= '9') ++d;
  if (d == q) return fallback ? *fallback : Value::of_int(0);
  return Value::of_int(std::stoll(s.substr(p, d - p)));
}

Value join(const Value& operand, const Text& sep) {
  Text out;
  bool first = true;
  auto add = [&](const Text& t) {
    if (!first) out.append(sep);
    first = false;
    out.append(t);
  };
  if (operand.is(K::kString)) {
    const std::string& s = operand.text.bytes;
    for (size_t p = 0; p < s.size();) {
      size_t q = p;
      utf8_next(s, q);
      add(operand.text.sub(p, q - p));
      p = q;
    }
  } else if (operand.is(K::kArray)) {
    for (const Value& x : *operand.array) add(x.is_nullish() ? Text() : concat_text(x));
  } else {
    runtime_error(std::string("cannot join a ") + operand.type_name());
  }
  return Value::of(std::move(out));
}

Value sorted(const Value& operand, bool reverse, bool case_sensitive, const Value* attribute) {
  Array a = *operand.array;
  std::string path;
  if (attribute && !attribute->is_nullish())
    path = attribute->is(K::kInt) ? std::to_string(attribute->integer) : attribute->text.bytes;
  auto key = [&](const Value& v) { return path.empty() ? v : attribute_of(v, path); };
  std::stable_sort(a.begin(), a.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(key(x), key(y), case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::of(std::move(a));
}

Value json_filter(const Value& operand, const Args& a) {
  JsonOptions o;
  if (const Value* v = a.kwarg("indent"); v && !v->is_nullish()) {
    if (!v->is(K::kInt)) runtime_error("tojson: indent must be an integer");
    o.indent = int(v->integer);
  }
  if (const Value* v = a.kwarg("ensure_ascii")) o.ensure_ascii = truthy(*v);
  if (const Value* v = a.kwarg("sort_keys")) o.sort_keys = truthy(*v);
  if (const Value* v = a.kwarg("separators"); v && !v->is_nullish()) {
    if (!v->is(K::kArray) || v->array->size() != 2 || !(*v->array)[0].is(K::kString) || !(*v->array)[1].is(K::kString))
      runtime_error("tojson: separators must be two strings");
    o.item_separator = (*v->array)[0].text.bytes;
    o.key_separator = (*v->array)[1].text.bytes;
  }
  return Value::of(Text(to_json(operand, o), /*input=*/true));
}

[[noreturn]] void unknown_filter(const std::string& name, const Value& operand) {
  runtime_error("unknown filter \"" + name + "\" for a " + operand.type_name());
}

// indent: each line after the first `first` is false, and each empty line unless `blank`, gets `width` spaces.
Value indent_lines(const Text& t, int64_t width, bool first, bool blank) {
  // Python's ' ' * width: a negative width indents by nothing. A width no template needs is refused rather than
  // allocated (the template comes from a model file).
  constexpr int64_t kMaxIndent = 4096;
  if (width > kMaxIndent) runtime_error(cat("indent(", width, ") is wider than ", kMaxIndent, " columns"));
  width = std::max<int64_t>(width, 0);
  Text out;
  size_t pos = 0, line = 0;
  while (true) {
    size_t nl = t.bytes.find('\n', pos);
    Text part = t.sub(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!((!first && line == 0) || (!blank && part.bytes.empty()))) out.append_template(std::string(width, ' '));
    out.append(part);
    if (nl == std::string::npos) break;
    out.append(t.sub(nl, 1));
    pos = nl + 1;
    ++line;
  }
  return Value::of(std::move(out));
}

// parseFloat(s): `fallback` (else 0.0) when s does not start with a number.
Value parse_float_text(const std::string& s, const Value* fallback) {
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return fallback ? *fallback : Value::of_float(0);
  return Value::of_float(d);
}

Value unique_items(const Array& a) {
  Array out;
  for (const Value& x : a)
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return strict_equal(x, y); })) out.push_back(x);
  return Value::of(std::move(out));
}

// The argument-less filters of each operand kind.
Value plain_array_filter(const Value& operand, const std::string& name) {
  const Array& a = *operand.array;
  if (name == "list") return operand;
  if (name == "first") return a.empty() ? Value() : a.front();
  if (name == "last") return a.empty() ? Value() : a.back();
  if (name == "length") return Value::of_int(int64_t(a.size()));
  if (name == "reverse") return Value::of(Array(a.rbegin(), a.rend()));
  if (name == "sort") return sorted(operand, false, false, nullptr);
  if (name == "join") return join(operand, Text());
  if (name == "string") return Value::of(Text(to_json(operand, {}, false), true));
  if (name == "unique") return unique_items(a);
  unknown_filter(name, operand);
}

Value plain_string_filter(const Value& operand, const std::string& name) {
  const Text& t = operand.text;
  if (name == "length") return Value::of_int(int64_t(code_points(t.bytes)));
  if (name == "upper") return Value::of(remapped(t, to_upper(t.bytes)));
  if (name == "lower") return Value::of(remapped(t, to_lower(t.bytes)));
  if (name == "title") return Value::of(title_case(t));
  if (name == "capitalize") return Value::of(capitalize(t));
  if (name == "trim") return Value::of(strip(t, true, true, nullptr));
  if (name == "join" || name == "string") return operand;
  if (name == "int") return parse_int_text(t.bytes, nullptr);
  if (name == "float") return parse_float_text(t.bytes, nullptr);
  if (name == "indent") return indent_lines(t, 4, false, false);
  unknown_filter(name, operand);
}

Value plain_number_filter(const Value& operand, const std::string& name) {
  if (name == "abs") return operand.is(K::kInt) ? Value::of_int(std::llabs(operand.integer)) : Value::of_float(std::fabs(operand.real));
  if (name == "int") return operand.is(K::kInt) ? operand : Value::of_int(int64_t(std::floor(operand.real)));
  if (name == "float") return Value::of_float(operand.is(K::kInt) ? double(operand.integer) : operand.real);
  if (name == "string") return Value::of(to_text(operand));
  unknown_filter(name, operand);
}

Value plain_object_filter(const Value& operand, const std::string& name) {
  if (name == "items") return items_of(operand);
  if (name == "length") return Value::of_int(int64_t(operand.object->size()));
  if (Value m = builtin_member(operand, name); !m.is(K::kUndefined)) {
    if (!m.is(K::kFunction)) return m;
    Args none;
    Scope unused;
    return (*m.function)(none, unused);
  }
  unknown_filter(name, operand);
}

Value plain_bool_filter(const Value& operand, const std::string& name) {
  if (name == "bool") return operand;
  if (name == "int") return Value::of_int(operand.boolean ? 1 : 0);
  if (name == "float") return Value::of_float(operand.boolean ? 1 : 0);
  if (name == "string") return Value::of_string(operand.boolean ? "true" : "false");
  unknown_filter(name, operand);
}

// Filters written without arguments (`x | trim`).
Value plain_filter(const Value& operand, const std::string& name) {
  if (name == "safe") return operand;
  if (name == "tojson") return Value::of(Text(to_json(operand, {}), /*input=*/true));
  switch (operand.kind) {
    case K::kArray: return plain_array_filter(operand, name);
    case K::kString: return plain_string_filter(operand, name);
    case K::kInt:
    case K::kFloat: return plain_number_filter(operand, name);
    case K::kObject: return plain_object_filter(operand, name);
    case K::kBool: return plain_bool_filter(operand, name);
    default: break;
  }
  unknown_filter(name, operand);
}

// int(default) / float(default) on any operand.
Value number_filter(const Value& operand, const std::string& name, const Args& a) {
  const Value* fallback = arg(a, 0, "default");
  if (operand.is(K::kString)) {
    if (name == "int") return parse_int_text(operand.text.bytes, fallback);
    return parse_float_text(operand.text.bytes, fallback);
  }
  if (operand.is_number()) return operand;
  if (operand.is(K::kBool)) return name == "int" ? Value::of_int(operand.boolean) : Value::of_float(operand.boolean);
  runtime_error("cannot apply " + name + " to a " + operand.type_name());
}

// selectattr(attr[, test[, arg]]) / rejectattr: the mappings whose attribute passes (fails) the test, or is truthy
// (falsy) without one.
Value select_by_attribute(const Value& operand, const std::string& name, const Args& a) {
  const bool select = name == "selectattr";
  for (const Value& x : *operand.array)
    if (!x.is_mapping()) runtime_error(name + " applies to a list of mappings");
  if (a.pos.empty() || !a.pos[0].is(K::kString)) runtime_error(name + " needs an attribute name");
  const Value* test = a.pos.size() > 1 ? &a.pos[1] : nullptr;
  const Value* test_arg = a.pos.size() > 2 ? &a.pos[2] : nullptr;
  Array out;
  for (const Value& x : *operand.array) {
    const Value* attr = find_key(*x.object, a.pos[0].text.bytes);
    bool r = false;
    if (attr && !attr->is(K::kUndefined)) r = test ? run_test(test->text.bytes, *attr, test_arg) : truthy(*attr);
    if (r == select) out.push_back(x);
  }
  return Value::of(std::move(out));
}

// map(attribute=path[, default=v]) over a list of mappings.
Value map_attribute(const Value& operand, const Args& a) {
  const Value* attr = a.kwarg("attribute");
  if (!attr || !attr->is(K::kString)) runtime_error("map is supported with attribute= only");
  const Value* fallback = a.kwarg("default");
  Array out;
  for (const Value& x : *operand.array) {
    if (!x.is_mapping()) runtime_error("map(attribute=...) applies to a list of mappings");
    Value v = attribute_of(x, attr->text.bytes);
    out.push_back(v.is(K::kUndefined) && fallback ? *fallback : v);
  }
  return Value::of(std::move(out));
}

// The filters with arguments of each operand kind.
Value call_array_filter(const Value& operand, const std::string& name, const Args& a) {
  if (name == "sort")
    return sorted(operand, flag_arg(a, 0, "reverse", false), flag_arg(a, 1, "case_sensitive", false),
                  arg(a, 2, "attribute"));
  if (name == "selectattr" || name == "rejectattr") return select_by_attribute(operand, name, a);
  if (name == "map") return map_attribute(operand, a);
  unknown_filter(name, operand);
}

Value call_string_filter(const Value& operand, const std::string& name, const Args& a) {
  if (name == "indent") {
    const Value* width_v = arg(a, 0, "width");
    const int64_t width = width_v && width_v->is(K::kInt) ? width_v->integer : 4;
    const bool first = truthy(arg(a, 1, "first") ? *arg(a, 1, "first") : Value::of(false));
    const bool blank = truthy(arg(a, 2, "blank") ? *arg(a, 2, "blank") : Value::of(false));
    return indent_lines(operand.text, width, first, blank);
  }
  if (name == "replace") {
    if (a.pos.size() < 2) runtime_error("replace() takes two strings");
    return replace(operand.text, a.pos[0], a.pos[1], arg(a, 2, "count"));
  }
  unknown_filter(name, operand);
}

// Filters called with arguments (`x | join(", ")`).
Value call_filter(Interpreter& in, const Value& operand, const Node& call, Scope& scope) {
  const std::string& name = call.kids[0]->text;
  Args a = in.eval_args(call, 1, scope);
  if (name == "tojson") return json_filter(operand, a);
  if (name == "join") {
    const Value* sep = arg(a, 0, "separator");
    if (sep && !sep->is(K::kString)) runtime_error("join: the separator must be a string");
    return join(operand, sep ? sep->text : Text());
  }
  if (name == "int" || name == "float") return number_filter(operand, name, a);
  if (name == "default") {
    const Value fallback = a.pos.empty() ? Value::of_string("") : a.pos[0];
    const bool boolean = flag_arg(a, 1, "boolean", false);
    return operand.is(K::kUndefined) || (boolean && !truthy(operand)) ? fallback : operand;
  }
  if (operand.is(K::kArray)) return call_array_filter(operand, name, a);
  if (operand.is(K::kString)) return call_string_filter(operand, name, a);
  if (operand.is(K::kObject)) {
    Value m = builtin_member(operand, name);
    if (m.is(K::kFunction)) return (*m.function)(a, scope);
  }
  unknown_filter(name, operand);
}

Value method(Function f) { return Value::of(std::move(f)); }

}  // namespace

Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, Scope& scope) {
  if (filter.kind == NodeKind::kIdentifier) return plain_filter(operand, filter.text);
  if (filter.kind == NodeKind::kCall && filter.kids[0]->kind == NodeKind::kIdentifier)
    return call_filter(in, operand, filter, scope);
  runtime_error("unsupported filter expression");
}

bool run_test(const std::string& name, const Value& v, const Value* argument) {
  if (name == "boolean") return v.is(K::kBool);
  if (name == "callable") return v.is(K::kFunction);
  if (name == "odd" || name == "even") {
    if (!v.is(K::kInt)) runtime_error("cannot test " + name + " on a " + v.type_name());
    return (v.integer % 2 != 0) == (name == "odd");
  }
  if (name == "false") return v.is(K::kBool) && !v.boolean;
  if (name == "true") return v.is(K::kBool) && v.boolean;
  if (name == "none") return v.is(K::kNone);
  if (name == "string") return v.is(K::kString);
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is(K::kInt);
  if (name == "iterable") return v.is(K::kArray) || v.is(K::kString);
  if (name == "mapping") return v.is(K::kObject);
  if (name == "sequence") return v.is(K::kArray) || v.is(K::kObject) || v.is(K::kString);
  if (name == "lower") return v.is(K::kString) && v.text.bytes == to_lower(v.text.bytes);
  if (name == "upper") return v.is(K::kString) && v.text.bytes == to_upper(v.text.bytes);
  if (name == "defined") return !v.is(K::kUndefined);
  if (name == "undefined") return v.is(K::kUndefined);
  if (name == "equalto" || name == "eq") return argument && strict_equal(v, *argument);
  runtime_error("unknown test \"" + name + "\"");
}

Value builtin_member(const Value& object, const std::string& name) {
  if (object.is(K::kArray)) return name == "length" ? Value::of_int(int64_t(object.array->size())) : Value();
  if (object.is(K::kString)) {
    const Text t = object.text;
    if (name == "length") return Value::of_int(int64_t(code_points(t.bytes)));
    if (name == "upper") return method([t](Args&, Scope&) { return Value::of(remapped(t, to_upper(t.bytes))); });
    if (name == "lower") return method([t](Args&, Scope&) { return Value::of(remapped(t, to_lower(t.bytes))); });
    if (name == "title") return method([t](Args&, Scope&) { return Value::of(title_case(t)); });
    if (name == "capitalize") return method([t](Args&, Scope&) { return Value::of(capitalize(t)); });
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip", right = name != "lstrip";
      return method([t, left, right](Args& a, Scope&) {
        return Value::of(strip(t, left, right, a.pos.empty() ? nullptr : &a.pos[0]));
      });
    }
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return method([t, starts](Args& a, Scope&) {
        if (a.pos.empty()) runtime_error("startswith()/endswith() need an argument");
        return Value::of(starts_or_ends(t.bytes, a.pos[0], starts));
      });
    }
    if (name == "split")
      return method([t](Args& a, Scope&) { return split(t, arg(a, 0, "sep"), arg(a, 1, "maxsplit")); });
    if (name == "replace")
      return method([t](Args& a, Scope&) {
        if (a.pos.size() < 2) runtime_error("replace() takes two strings");
        return replace(t, a.pos[0], a.pos[1], arg(a, 2, "count"));
      });
    return Value();
  }
  if (!object.is(K::kObject)) return Value();
  const Value o = object;
  if (name == "get")
    return method([o](Args& a, Scope&) {
      if (a.pos.empty() || !a.pos[0].is(K::kString)) runtime_error("get() needs a string key");
      if (const Value* v = find_key(*o.object, a.pos[0].text.bytes)) return *v;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    });
  if (name == "items") return method([o](Args&, Scope&) { return items_of(o); });
  if (name == "keys")
    return method([o](Args&, Scope&) {
      Array keys;
      for (const auto& kv : *o.object) keys.push_back(key_value(kv.first));
      return Value::of(std::move(keys));
    });
  if (name == "values")
    return method([o](Args&, Scope&) {
      Array values;
      for (const auto& kv : *o.object) values.push_back(kv.second);
      return Value::of(std::move(values));
    });
  if (name == "dictsort")
    return method([o](Args& a, Scope&) {
      const bool case_sensitive = flag_arg(a, 0, "case_sensitive", false);
      const Value* by = arg(a, 1, "by");
      const bool by_value = by && by->is(K::kString) && by->text.bytes == "value";
      const bool reverse = flag_arg(a, 2, "reverse", false);
      Array pairs = *items_of(o).array;
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
        const int c = compare_values((*x.array)[by_value], (*y.array)[by_value], case_sensitive);
        return reverse ? c > 0 : c < 0;
      });
      return Value::of(std::move(pairs));
    });
  return Value();
}

void install_globals(Scope& g) {
  g.set("false", Value::of(false));
  g.set("true", Value::of(true));
  g.set("none", Value::none());
  g.set("False", Value::of(false));
  g.set("True", Value::of(true));
  g.set("None", Value::none());
  g.set("raise_exception", method([](Args& a, Scope&) -> Value {
          std::string msg;
          for (const Value& v : a.pos) msg += (msg.empty() ? "" : ",") + concat_text(v).bytes;
          TS_FAIL("chat template raised an exception: ", msg);
        }));
  g.set("range", method([](Args& a, Scope&) {
          for (const Value& v : a.pos)
            if (!v.is(K::kInt)) runtime_error("range() takes integers");
          int64_t start = 0, stop = 0, step = 1;
          if (a.pos.size() == 1) stop = a.pos[0].integer;
          else if (a.pos.size() >= 2) start = a.pos[0].integer, stop = a.pos[1].integer;
          if (a.pos.size() >= 3) step = a.pos[2].integer;
          if (step == 0) runtime_error("range() step must not be zero");
          Array out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.size() >= 1000000) runtime_error("range() of more than a million numbers");
            out.push_back(Value::of_int(i));
          }
          return Value::of(std::move(out));
        }));
  g.set("namespace", method([](Args& a, Scope&) {
          if (a.pos.size() > 1) runtime_error("namespace() takes at most one positional argument");
          Object entries;
          if (!a.pos.empty()) {
            const Value& src = a.pos[0];
            if (src.is(K::kObject)) {
              entries = *src.object;
            } else if (src.is(K::kArray)) {
              for (const Value& pair : *src.array) {
                if (!pair.is(K::kArray) || pair.array->size() != 2 || !(*pair.array)[0].is(K::kString))
                  runtime_error("namespace() expects a mapping or [key, value] pairs");
                set_key(entries, (*pair.array)[0].text.bytes, (*pair.array)[1]);
              }
            } else {
              runtime_error(std::string("namespace() cannot take a ") + src.type_name());
            }
          }
          for (const auto& [k, v] : a.kw) set_key(entries, k, v);
          return Value::of(std::move(entries), K::kNamespace);
        }));
  g.set("strftime_now", method([](Args& a, Scope&) {
          if (a.pos.empty() || !a.pos[0].is(K::kString)) runtime_error("strftime_now() takes a format string");
          const std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          char buf[256];
          const size_t n = std::strftime(buf, sizeof(buf), a.pos[0].text.bytes.c_str(), &local);
          return Value::of_string(std::string(buf, n));
        }));
}

}  // namespace ts::tok::jinja
