// Syntax tree of the chat-template interpreter, as @huggingface/jinja's parser builds it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_lexer.h"

namespace ts::tok::jinja {

enum class NodeKind {
  // statements
  kProgram, kIf, kFor, kBreak, kContinue, kSet, kMacro, kComment, kFilterBlock,
  // expressions
  kIdentifier, kInt, kFloat, kString, kArray, kTuple, kObject, kMember, kCall, kBinary, kUnary, kFilter,
  kSelect, kTest, kSlice, kKeywordArg, kTernary,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

// What `kids` hold, by kind:
//   kIf: [test], body, alternate          kFor: [loop variable, iterable], body, alternate = else block
//   kSet: [assignee, value or null], body  kMacro: text = name, kids = parameters, body
//   kFilterBlock: [filter], body           kMember: [object, property], flag = computed ([...])
//   kCall: [callee, arguments...]          kBinary / kUnary: text = operator, [operands]
//   kFilter: [operand, filter]             kSelect: [value, condition]  (`x if c` without else)
//   kTest: text = test, [operand], flag = negated ("is not")
//   kSlice: [start, stop, step] (null where omitted)   kKeywordArg: text = name, [value]
//   kTernary: [condition, if true, if false]            kArray / kTuple: elements; kObject: key, value, ...
struct Node {
  NodeKind kind;
  std::string text;     // identifier, string literal, operator, test name, macro name
  int64_t integer = 0;  // kInt
  double real = 0;      // kFloat
  bool flag = false;
  size_t offset = 0;    // byte offset of the first token (for errors)
  std::vector<NodePtr> kids, body, alternate;
};

// Throws ts::Error ("chat template syntax error: ...").
NodePtr parse(const std::vector<Token>& tokens);

}  // namespace ts::tok::jinja
