// The evaluator: statements and expressions, node for node as @huggingface/jinja's Interpreter.
#include "tokenizer/jinja_interpreter.h"

#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja.h"
#include "tokenizer/unicode.h"

namespace ts::tok::jinja {

void runtime_error(const std::string& what) { TS_FAIL("chat template: ", what); }

Value Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent)
    if (const Value* v = find_key(s->variables, name)) return *v;
  return Value();
}

namespace {

struct BreakSignal {};
struct ContinueSignal {};

using K = Value::Kind;

// Python slice semantics over n elements (the reference's slice()): the indices to take, in order.
std::vector<size_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const int64_t step = step_v.is(K::kInt) ? step_v.integer : 1;
  if (step == 0) runtime_error("slice step cannot be zero");
  const bool has_start = start_v.is(K::kInt), has_stop = stop_v.is(K::kInt);
  int64_t start, stop;
  if (step > 0) {
    start = !has_start ? 0 : start_v.integer < 0 ? std::max<int64_t>(n + start_v.integer, 0) : std::min(start_v.integer, n);
    stop = !has_stop ? n : stop_v.integer < 0 ? std::max<int64_t>(n + stop_v.integer, 0) : std::min(stop_v.integer, n);
  } else {
    start = !has_start ? n - 1
            : start_v.integer < 0 ? std::max<int64_t>(n + start_v.integer, -1) : std::min(start_v.integer, n - 1);
    stop = !has_stop ? -1 : stop_v.integer < -1 ? std::max<int64_t>(n + stop_v.integer, -1) : std::min(stop_v.integer, n - 1);
  }
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(size_t(i));
  return idx;
}

// Byte offsets of each code point of `s`, plus s.size() at the end.
std::vector<size_t> code_point_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t p = 0; p < s.size();) {
    starts.push_back(p);
    utf8_next(s, p);
  }
  starts.push_back(s.size());
  return starts;
}

Value number(double d, bool is_float) { return is_float ? Value::of_float(d) : Value::of_int(int64_t(d)); }

}  // namespace

Text Interpreter::block(const std::vector<NodePtr>& statements, Scope& scope) {
  Text out;
  for (const NodePtr& s : statements) {
    Value v = eval(*s, scope);
    if (!v.is_nullish()) out.append(to_text(v));
  }
  return out;
}

Args Interpreter::eval_args(const Node& call, size_t first_arg, Scope& scope) {
  Args args;
  for (size_t i = first_arg; i < call.kids.size(); ++i)
    if (call.kids[i]->kind != NodeKind::kKeywordArg) args.pos.push_back(eval(*call.kids[i], scope));
  for (size_t i = first_arg; i < call.kids.size(); ++i) {
    const Node& a = *call.kids[i];
    if (a.kind != NodeKind::kKeywordArg) continue;
    if (find_key(args.kw, a.text)) runtime_error("got multiple values for keyword argument '" + a.text + "'");
    args.kw.emplace_back(a.text, eval(*a.kids[0], scope));
  }
  return args;
}

Value Interpreter::eval(const Node& node, Scope& scope) {
  if (depth_ >= kMaxDepth) runtime_error("the template nests too deeply (macro recursion?) at byte " + std::to_string(node.offset));
  struct Guard {
    int& depth;
    ~Guard() { --depth; }
  } guard{++depth_};
  return eval_node(node, scope);
}

Value Interpreter::eval_node(const Node& node, Scope& scope) {
  switch (node.kind) {
    case NodeKind::kProgram: return Value::of(block(node.body, scope));
    case NodeKind::kSet: return eval_set(node, scope);
    case NodeKind::kIf:
      return Value::of(block(truthy(eval(*node.kids[0], scope)) ? node.body : node.alternate, scope));
    case NodeKind::kFor: return eval_for(node, scope);
    case NodeKind::kMacro: return eval_macro(node, scope);
    case NodeKind::kBreak: throw BreakSignal{};
    case NodeKind::kContinue: throw ContinueSignal{};
    case NodeKind::kComment: return Value::none();
    case NodeKind::kFilterBlock: return apply_filter(*this, Value::of(block(node.body, scope)), *node.kids[0], scope);
    case NodeKind::kInt: return Value::of_int(node.integer);
    case NodeKind::kFloat: return Value::of_float(node.real);
    case NodeKind::kString: return Value::of_string(node.text);
    case NodeKind::kArray:
    case NodeKind::kTuple: {
      Array a;
      for (const NodePtr& k : node.kids) a.push_back(eval(*k, scope));
      return Value::of(std::move(a));
    }
    case NodeKind::kObject: {
      Object o;
      for (size_t i = 0; i + 1 < node.kids.size(); i += 2) {
        Value key = eval(*node.kids[i], scope);
        if (!key.is(K::kString)) runtime_error(std::string("dict keys must be strings, got ") + key.type_name());
        set_key(o, key.text.bytes, eval(*node.kids[i + 1], scope));
      }
      return Value::of(std::move(o));
    }
    case NodeKind::kIdentifier: return scope.lookup(node.text);
    case NodeKind::kCall: {
      Args args = eval_args(node, 1, scope);
      Value fn = eval(*node.kids[0], scope);
      if (!fn.is(K::kFunction))
        runtime_error(std::string("cannot call something that is not a function (got ") + fn.type_name() + ")");
      return (*fn.function)(args, scope);
    }
    case NodeKind::kMember: return eval_member(node, scope);
    case NodeKind::kUnary: {
      Value v = eval(*node.kids[0], scope);
      if (node.text == "not") return Value::of(!truthy(v));
      const double sign = node.text == "-" ? -1 : 1;
      if (v.is(K::kInt)) return Value::of_int(int64_t(sign) * v.integer);
      if (v.is(K::kFloat)) return Value::of_float(sign * v.real);
      if (v.is(K::kBool)) return Value::of_int(int64_t(sign) * (v.boolean ? 1 : 0));
      runtime_error("unary " + node.text + " on a " + v.type_name());
    }
    case NodeKind::kBinary: return eval_binary(node, scope);
    case NodeKind::kFilter: return apply_filter(*this, eval(*node.kids[0], scope), *node.kids[1], scope);
    case NodeKind::kTest: {
      const bool result = run_test(node.text, eval(*node.kids[0], scope), nullptr);
      return Value::of(node.flag ? !result : result);
    }
    case NodeKind::kSelect: return truthy(eval(*node.kids[1], scope)) ? eval(*node.kids[0], scope) : Value();
    case NodeKind::kTernary:
      return truthy(eval(*node.kids[0], scope)) ? eval(*node.kids[1], scope) : eval(*node.kids[2], scope);
    case NodeKind::kSlice:
    case NodeKind::kKeywordArg: runtime_error("a slice or keyword argument outside [ ] or ( )");
  }
  runtime_error("unknown node");
}

Value Interpreter::eval_set(const Node& node, Scope& scope) {
  Value rhs = node.kids[1] ? eval(*node.kids[1], scope) : Value::of(block(node.body, scope));
  const Node& target = *node.kids[0];
  if (target.kind == NodeKind::kIdentifier) {
    scope.set(target.text, std::move(rhs));
  } else if (target.kind == NodeKind::kTuple) {
    if (!rhs.is(K::kArray)) runtime_error(std::string("cannot unpack a ") + rhs.type_name() + " in set");
    if (rhs.array->size() != target.kids.size()) runtime_error("wrong number of items to unpack in set");
    for (size_t i = 0; i < target.kids.size(); ++i) {
      if (target.kids[i]->kind != NodeKind::kIdentifier) runtime_error("cannot unpack to a non-identifier in set");
      scope.set(target.kids[i]->text, (*rhs.array)[i]);
    }
  } else if (target.kind == NodeKind::kMember) {
    Value object = eval(*target.kids[0], scope);
    if (!object.is(K::kNamespace)) runtime_error("cannot assign an attribute of a non-namespace object");
    if (target.kids[1]->kind != NodeKind::kIdentifier) runtime_error("cannot assign to a non-identifier member");
    set_key(*object.object, target.kids[1]->text, std::move(rhs));
  } else {
    runtime_error("invalid left-hand side of set");
  }
  return Value::none();
}

Value Interpreter::eval_for(const Node& node, Scope& parent) {
  Scope scope{&parent, {}};
  const Node& var = *node.kids[0];
  const Node* condition = nullptr;
  Value iterable;
  if (node.kids[1]->kind == NodeKind::kSelect) {  // for x in xs if cond
    iterable = eval(*node.kids[1]->kids[0], scope);
    condition = node.kids[1]->kids[1].get();
  } else {
    iterable = eval(*node.kids[1], scope);
  }
  Array items_in;
  if (iterable.is(K::kArray)) {
    items_in = *iterable.array;
  } else if (iterable.is(K::kObject)) {
    for (const auto& kv : *iterable.object) items_in.push_back(key_value(kv.first));
  } else {
    runtime_error(std::string("expected a list or mapping to loop over, got ") + iterable.type_name());
  }
  auto bind = [&](Scope& s, const Value& item) {
    if (var.kind == NodeKind::kIdentifier) {
      s.set(var.text, item);
      return;
    }
    if (!item.is(K::kArray)) runtime_error(std::string("cannot unpack a ") + item.type_name() + " in for");
    if (item.array->size() != var.kids.size()) runtime_error("wrong number of items to unpack in for");
    for (size_t j = 0; j < var.kids.size(); ++j) s.set(var.kids[j]->text, (*item.array)[j]);
  };
  Array items;
  for (const Value& item : items_in) {
    if (condition) {
      Scope test_scope{&scope, {}};
      bind(test_scope, item);
      if (!truthy(eval(*condition, test_scope))) continue;
    }
    items.push_back(item);
  }
  Text out;
  bool no_iteration = true;
  const int64_t n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Object loop = {{"index", Value::of_int(i + 1)},
                   {"index0", Value::of_int(i)},
                   {"revindex", Value::of_int(n - i)},
                   {"revindex0", Value::of_int(n - i - 1)},
                   {"first", Value::of(i == 0)},
                   {"last", Value::of(i == n - 1)},
                   {"length", Value::of_int(n)},
                   {"previtem", i > 0 ? items[i - 1] : Value()},
                   {"nextitem", i < n - 1 ? items[i + 1] : Value()}};
    scope.set("loop", Value::of(std::move(loop)));
    bind(scope, items[i]);
    try {
      out.append(block(node.body, scope));
    } catch (const ContinueSignal&) {
      continue;
    } catch (const BreakSignal&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) out.append(block(node.alternate, scope));
  return Value::of(std::move(out));
}

Value Interpreter::eval_macro(const Node& node, Scope& scope) {
  const Node* macro = &node;
  scope.set(node.text, Value::of(Function([this, macro](Args& args, Scope& caller) {
    Scope local{&caller, {}};
    const auto& params = macro->kids;
    std::vector<const Node*> pending_defaults;
    Object extra_kw = args.kw;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string& name = params[i]->text;
      Value v;
      bool given = i < args.pos.size();
      if (given) v = args.pos[i];
      for (auto it = extra_kw.begin(); !given && it != extra_kw.end(); ++it)
        if (it->first == name) {
          v = it->second;
          extra_kw.erase(it);
          given = true;
          break;
        }
      if (!given && params[i]->kind == NodeKind::kKeywordArg) pending_defaults.push_back(params[i].get());
      local.set(name, v);
    }
    local.set("kwargs", Value::of(extra_kw));
    Array varargs;
    for (size_t i = params.size(); i < args.pos.size(); ++i) varargs.push_back(args.pos[i]);
    local.set("varargs", Value::of(std::move(varargs)));
    for (const Node* p : pending_defaults) local.set(p->text, eval(*p->kids[0], local));
    return Value::of(block(macro->body, local));
  })));
  return Value::none();
}

Value Interpreter::eval_slice(const Value& object, const Node& slice, Scope& scope) {
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    if (slice.kids[i]) parts[i] = eval(*slice.kids[i], scope);
    if (!parts[i].is(K::kInt) && !parts[i].is(K::kUndefined)) runtime_error("slice indices must be integers");
  }
  if (object.is(K::kArray)) {
    Array out;
    for (size_t i : slice_indices(int64_t(object.array->size()), parts[0], parts[1], parts[2]))
      out.push_back((*object.array)[i]);
    return Value::of(std::move(out));
  }
  if (!object.is(K::kString)) runtime_error(std::string("cannot slice a ") + object.type_name());
  const std::vector<size_t> starts = code_point_starts(object.text.bytes);
  Text out;
  for (size_t i : slice_indices(int64_t(starts.size()) - 1, parts[0], parts[1], parts[2]))
    out.append(object.text.sub(starts[i], starts[i + 1] - starts[i]));
  return Value::of(std::move(out));
}

Value Interpreter::eval_member(const Node& node, Scope& scope) {
  Value object = eval(*node.kids[0], scope);
  const Node& prop = *node.kids[1];
  Value key;
  if (node.flag) {
    if (prop.kind == NodeKind::kSlice) return eval_slice(object, prop, scope);
    key = eval(prop, scope);
  } else if (prop.kind == NodeKind::kInt) {
    key = Value::of_int(prop.integer);
  } else {
    key = Value::of_string(prop.text);
  }
  if (object.is_mapping()) {
    if (!key.is(K::kString)) runtime_error(std::string("mapping keys are strings, got ") + key.type_name());
    if (const Value* v = find_key(*object.object, key.text.bytes)) return *v;
    return object.is(K::kObject) ? builtin_member(object, key.text.bytes) : Value();
  }
  if (object.is(K::kArray) || object.is(K::kString)) {
    if (key.is(K::kInt)) {
      if (object.is(K::kArray)) {
        const int64_t n = int64_t(object.array->size());
        const int64_t i = key.integer < 0 ? n + key.integer : key.integer;
        return i >= 0 && i < n ? (*object.array)[i] : Value();
      }
      const std::vector<size_t> starts = code_point_starts(object.text.bytes);
      const int64_t n = int64_t(starts.size()) - 1;
      const int64_t i = key.integer < 0 ? n + key.integer : key.integer;
      return i >= 0 && i < n ? Value::of(object.text.sub(starts[i], starts[i + 1] - starts[i])) : Value();
    }
    if (key.is(K::kString)) return builtin_member(object, key.text.bytes);
    runtime_error(std::string("cannot index a list or string with a ") + key.type_name());
  }
  if (!key.is(K::kString)) runtime_error(std::string("cannot access a property with a ") + key.type_name());
  return builtin_member(object, key.text.bytes);
}

Value Interpreter::eval_binary(const Node& node, Scope& scope) {
  const std::string& op = node.text;
  Value left = eval(*node.kids[0], scope);
  if (op == "and") return truthy(left) ? eval(*node.kids[1], scope) : left;
  if (op == "or") return truthy(left) ? left : eval(*node.kids[1], scope);
  Value right = eval(*node.kids[1], scope);
  if (op == "==") return Value::of(loose_equal(left, right));
  if (op == "!=") return Value::of(!loose_equal(left, right));
  const bool in_op = op == "in" || op == "not in";
  if (left.is(K::kUndefined) || right.is(K::kUndefined)) {
    if (right.is(K::kUndefined) && in_op) return Value::of(op == "not in");
    runtime_error("cannot apply " + op + " to an undefined value");
  }
  if (left.is(K::kNone) || right.is(K::kNone)) runtime_error("cannot apply " + op + " to none");
  if (op == "~") {
    Text t = concat_text(left);
    t.append(concat_text(right));
    return Value::of(std::move(t));
  }
  const bool num_like_l = left.is_number() || left.is(K::kBool), num_like_r = right.is_number() || right.is(K::kBool);
  auto num = [](const Value& v) { return v.is(K::kInt) ? double(v.integer) : v.is(K::kFloat) ? v.real : v.boolean ? 1.0 : 0.0; };
  if (op == "**" && num_like_l && num_like_r) {
    const double a = num(left), b = num(right);
    if (a == 0 && b < 0) runtime_error("0.0 cannot be raised to a negative power");
    const double r = std::pow(a, b);
    if (!std::isfinite(r)) runtime_error("exponentiation result is not finite");
    return number(r, left.is(K::kFloat) || right.is(K::kFloat) || b < 0);
  }
  if (left.is_number() && right.is_number()) {
    const bool is_float = left.is(K::kFloat) || right.is(K::kFloat);
    if (!is_float && (op == "+" || op == "-" || op == "*")) {
      const int64_t a = left.integer, b = right.integer;
      return Value::of_int(op == "+" ? a + b : op == "-" ? a - b : a * b);
    }
    const double a = num(left), b = num(right);
    if (op == "+") return Value::of_float(a + b);
    if (op == "-") return Value::of_float(a - b);
    if (op == "*") return Value::of_float(a * b);
    if (op == "/") {
      if (b == 0) runtime_error("division by zero");
      return Value::of_float(a / b);
    }
    if (op == "//" || op == "%") {
      if (b == 0) runtime_error("integer division or modulo by zero");
      if (op == "//") return number(std::floor(a / b), is_float);
      if (!is_float) return Value::of_int(left.integer % right.integer);  // JavaScript %: sign of the dividend
      return Value::of_float(std::fmod(a, b));
    }
    if (op == "<") return Value::of(a < b);
    if (op == ">") return Value::of(a > b);
    if (op == "<=") return Value::of(a <= b);
    if (op == ">=") return Value::of(a >= b);
  }
  if (left.is(K::kArray) && right.is(K::kArray) && op == "+") {
    Array a = *left.array;
    a.insert(a.end(), right.array->begin(), right.array->end());
    return Value::of(std::move(a));
  }
  if (right.is(K::kArray) && in_op) {
    bool member = false;
    for (const Value& x : *right.array) member = member || strict_equal(x, left);
    return Value::of(member == (op == "in"));
  }
  if ((left.is(K::kString) || right.is(K::kString)) && op == "+") {
    Text t = concat_text(left);
    t.append(concat_text(right));
    return Value::of(std::move(t));
  }
  if (left.is(K::kString) && right.is(K::kString) && in_op)
    return Value::of((right.text.bytes.find(left.text.bytes) != std::string::npos) == (op == "in"));
  if (left.is(K::kString) && right.is(K::kObject) && in_op)
    return Value::of((find_key(*right.object, left.text.bytes) != nullptr) == (op == "in"));
  runtime_error("unsupported operator " + op + " between " + left.type_name() + " and " + right.type_name());
}

Template::Template(const std::string& source) : program_(parse(tokenize(source))) {}

Text Template::render(const Object& variables) const {
  Scope globals;
  install_globals(globals);
  for (const auto& [name, v] : variables) globals.set(name, v);
  Interpreter in;
  try {
    return in.block(program_->body, globals);
  } catch (const BreakSignal&) {
    runtime_error("break outside a loop");
  } catch (const ContinueSignal&) {
    runtime_error("continue outside a loop");
  }
}

}  // namespace ts::tok::jinja
