// Internal to the chat-template interpreter: scopes, the evaluator, and the built-ins (jinja_builtins.cc).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace ts::tok::jinja {

// Variables of one scope; lookups walk up to the globals. `set` writes the innermost scope (Jinja semantics:
// a set inside a loop body does not leak out; namespaces exist for that).
struct Scope {
  Scope* parent = nullptr;
  Object variables;
  Value lookup(const std::string& name) const;  // undefined when no scope has it
  void set(const std::string& name, Value v) { set_key(variables, name, std::move(v)); }
};

class Interpreter {
 public:
  Value eval(const Node& node, Scope& scope);
  Text block(const std::vector<NodePtr>& statements, Scope& scope);
  Args eval_args(const Node& call, size_t first_arg, Scope& scope);

  static constexpr int kMaxDepth = 400;  // nested evaluations (deep expressions, macro recursion)

 private:
  int depth_ = 0;
  Value eval_node(const Node& node, Scope& scope);
  Value eval_set(const Node& node, Scope& scope);
  Value eval_for(const Node& node, Scope& scope);
  Value eval_macro(const Node& node, Scope& scope);
  Value eval_member(const Node& node, Scope& scope);
  Value eval_binary(const Node& node, Scope& scope);
  Value eval_slice(const Value& object, const Node& slice, Scope& scope);
};

// Built-ins (jinja_builtins.cc).
void install_globals(Scope& globals);
Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, Scope& scope);
bool run_test(const std::string& name, const Value& operand, const Value* argument);  // throws if unknown
// A method or property of a value ("abc".upper, d.items, list.length); undefined if there is none.
Value builtin_member(const Value& object, const std::string& name);

[[noreturn]] void runtime_error(const std::string& what);

}  // namespace ts::tok::jinja
