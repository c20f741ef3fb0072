// Recursive descent over the tokens, rule for rule as @huggingface/jinja's parser (same precedence: ternary <
// or < and < not < comparison/in < + - ~ < * / // % < ** < is < | < unary sign < call/member < primary).
#include <set>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace ts::tok::jinja {

namespace {

using T = TokenType;

NodePtr make(NodeKind kind, size_t offset, std::string text = {}) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->offset = offset;
  n->text = std::move(text);
  return n;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  NodePtr program() {
    NodePtr p = make(NodeKind::kProgram, 0);
    while (cur_ < tokens_.size()) p->body.push_back(any());
    return p;
  }

 private:
  const std::vector<Token>& tokens_;
  size_t cur_ = 0;
  int depth_ = 0;  // nesting of any() / expression(), bounded so that a hostile template cannot exhaust the stack

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > 300) p.fail("the template nests too deeply");
    }
    ~Nest() { --p.depth_; }
  };

  [[noreturn]] void fail(const std::string& what) const {
    const size_t offset = cur_ < tokens_.size() ? tokens_[cur_].offset : (tokens_.empty() ? 0 : tokens_.back().offset);
    TS_FAIL("chat template syntax error near byte ", offset, " (after preprocessing): ", what);
  }
  const Token& tok() const {
    if (cur_ >= tokens_.size()) fail("unexpected end of template");
    return tokens_[cur_];
  }
  bool is(T type, size_t ahead = 0) const { return cur_ + ahead < tokens_.size() && tokens_[cur_ + ahead].type == type; }
  bool is_identifier(const char* name, size_t ahead = 0) const {
    return is(T::kIdentifier, ahead) && tokens_[cur_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<const char*> names) const {
    if (!is(T::kOpenStatement) || !is(T::kIdentifier, 1)) return false;
    for (const char* n : names)
      if (tokens_[cur_ + 1].value == n) return true;
    return false;
  }
  const Token& expect(T type, const char* what) {
    if (!is(type)) fail(std::string("expected ") + what);
    return tokens_[cur_++];
  }
  void expect_identifier(const char* name) {
    if (!is_identifier(name)) fail(std::string("expected ") + name);
    ++cur_;
  }
  void end_block(const char* name) {
    expect(T::kOpenStatement, "{%");
    expect_identifier(name);
    expect(T::kCloseStatement, "%}");
  }

  NodePtr any() {
    Nest nest(*this);
    const Token& t = tok();
    switch (t.type) {
      case T::kComment: ++cur_; return make(NodeKind::kComment, t.offset, t.value);
      case T::kText: ++cur_; return make(NodeKind::kString, t.offset, t.value);
      case T::kOpenStatement: return statement();
      case T::kOpenExpression: {
        ++cur_;
        NodePtr e = expression();
        expect(T::kCloseExpression, "}}");
        return e;
      }
      default: fail("unexpected token \"" + t.value + "\"");
    }
  }

  NodePtr statement() {
    expect(T::kOpenStatement, "{%");
    if (!is(T::kIdentifier)) fail("unknown statement");
    const Token& name = tokens_[cur_++];
    NodePtr result;
    if (name.value == "set") {
      result = set_statement(name.offset);
    } else if (name.value == "if") {
      result = if_statement(name.offset);
      end_block("endif");
    } else if (name.value == "macro") {
      result = make(NodeKind::kMacro, name.offset);
      NodePtr macro_name = primary();
      if (macro_name->kind != NodeKind::kIdentifier) fail("expected an identifier after macro");
      result->text = macro_name->text;
      result->kids = arguments(/*parameters=*/true);
      expect(T::kCloseStatement, "%}");
      while (!is_statement({"endmacro"})) result->body.push_back(any());
      end_block("endmacro");
    } else if (name.value == "for") {
      result = for_statement(name.offset);
      end_block("endfor");
    } else if (name.value == "break" || name.value == "continue") {
      expect(T::kCloseStatement, "%}");
      result = make(name.value == "break" ? NodeKind::kBreak : NodeKind::kContinue, name.offset);
    } else if (name.value == "filter") {
      result = make(NodeKind::kFilterBlock, name.offset);
      NodePtr filter = primary();
      if (filter->kind == NodeKind::kIdentifier && is(T::kOpenParen)) filter = call(std::move(filter));
      result->kids.push_back(std::move(filter));
      expect(T::kCloseStatement, "%}");
      while (!is_statement({"endfilter"})) result->body.push_back(any());
      end_block("endfilter");
    } else {
      fail("unknown or unsupported statement \"" + name.value + "\"");
    }
    return result;
  }

  NodePtr set_statement(size_t offset) {
    NodePtr s = make(NodeKind::kSet, offset);
    s->kids.push_back(expression_sequence(false));
    if (is(T::kEquals)) {
      ++cur_;
      s->kids.push_back(expression_sequence(false));
    } else {
      s->kids.push_back(nullptr);
      expect(T::kCloseStatement, "%}");
      while (!is_statement({"endset"})) s->body.push_back(any());
      expect(T::kOpenStatement, "{%");
      expect_identifier("endset");
    }
    expect(T::kCloseStatement, "%}");
    return s;
  }

  NodePtr if_statement(size_t offset) {
    NodePtr n = make(NodeKind::kIf, offset);
    n->kids.push_back(expression());
    expect(T::kCloseStatement, "%}");
    while (!is_statement({"elif", "else", "endif"})) n->body.push_back(any());
    if (is_statement({"elif"})) {
      cur_ += 2;
      n->alternate.push_back(if_statement(tokens_[cur_ - 1].offset));
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(T::kCloseStatement, "%}");
      while (!is_statement({"endif"})) n->alternate.push_back(any());
    }
    return n;
  }

  NodePtr for_statement(size_t offset) {
    NodePtr n = make(NodeKind::kFor, offset);
    NodePtr var = expression_sequence(true);
    if (var->kind != NodeKind::kIdentifier && var->kind != NodeKind::kTuple)
      fail("expected an identifier or tuple as the loop variable");
    if (!is_identifier("in")) fail("expected `in` after the loop variable");
    ++cur_;
    n->kids.push_back(std::move(var));
    n->kids.push_back(expression());
    expect(T::kCloseStatement, "%}");
    while (!is_statement({"endfor", "else"})) n->body.push_back(any());
    if (is_statement({"else"})) {
      cur_ += 2;
      expect(T::kCloseStatement, "%}");
      while (!is_statement({"endfor"})) n->alternate.push_back(any());
    }
    return n;
  }

  NodePtr expression_sequence(bool primary_only) {
    const size_t offset = tok().offset;
    NodePtr first = primary_only ? primary() : expression();
    if (!is(T::kComma)) return first;
    NodePtr tuple = make(NodeKind::kTuple, offset);
    tuple->kids.push_back(std::move(first));
    while (is(T::kComma)) {
      ++cur_;
      tuple->kids.push_back(primary_only ? primary() : expression());
    }
    return tuple;
  }

  NodePtr expression() {
    Nest nest(*this);
    return if_expression();
  }

  NodePtr if_expression() {
    NodePtr a = logical_or();
    if (!is_identifier("if")) return a;
    const size_t offset = tok().offset;
    ++cur_;
    NodePtr test = logical_or();
    if (is_identifier("else")) {
      ++cur_;
      NodePtr t = make(NodeKind::kTernary, offset);
      t->kids.push_back(std::move(test));
      t->kids.push_back(std::move(a));
      t->kids.push_back(if_expression());
      return t;
    }
    NodePtr s = make(NodeKind::kSelect, offset);
    s->kids.push_back(std::move(a));
    s->kids.push_back(std::move(test));
    return s;
  }

  NodePtr binary(std::string op, NodePtr left, NodePtr right, size_t offset) {
    NodePtr b = make(NodeKind::kBinary, offset, std::move(op));
    b->kids.push_back(std::move(left));
    b->kids.push_back(std::move(right));
    return b;
  }

  NodePtr logical_or() {
    NodePtr left = logical_and();
    while (is_identifier("or")) {
      const size_t offset = tokens_[cur_++].offset;
      left = binary("or", std::move(left), logical_and(), offset);
    }
    return left;
  }
  NodePtr logical_and() {
    NodePtr left = logical_not();
    while (is_identifier("and")) {
      const size_t offset = tokens_[cur_++].offset;
      left = binary("and", std::move(left), logical_not(), offset);
    }
    return left;
  }
  NodePtr logical_not() {
    Nest nest(*this);
    NodePtr result;
    while (is_identifier("not")) {  // as the reference: `not not x` keeps only the last negation's operand chain
      const size_t offset = tokens_[cur_++].offset;
      NodePtr u = make(NodeKind::kUnary, offset, "not");
      u->kids.push_back(logical_not());
      result = std::move(u);
    }
    return result ? std::move(result) : comparison();
  }
  NodePtr comparison() {
    NodePtr left = additive();
    while (true) {
      std::string op;
      const size_t offset = cur_ < tokens_.size() ? tokens_[cur_].offset : 0;
      if (is_identifier("not") && is_identifier("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_identifier("in") || is(T::kComparison)) {
        op = tokens_[cur_++].value;
      } else {
        break;
      }
      left = binary(op, std::move(left), additive(), offset);
    }
    return left;
  }
  NodePtr additive() {
    NodePtr left = multiplicative();
    while (is(T::kAdditive)) {
      const Token& op = tokens_[cur_++];
      left = binary(op.value, std::move(left), multiplicative(), op.offset);
    }
    return left;
  }
  NodePtr multiplicative() {
    NodePtr left = power();
    while (is(T::kMultiplicative)) {
      const Token& op = tokens_[cur_++];
      left = binary(op.value, std::move(left), power(), op.offset);
    }
    return left;
  }
  NodePtr power() {
    NodePtr left = test_expression();
    while (is(T::kPower)) {
      const Token& op = tokens_[cur_++];
      left = binary(op.value, std::move(left), test_expression(), op.offset);
    }
    return left;
  }
  NodePtr test_expression() {
    NodePtr operand = filter_expression();
    while (is_identifier("is")) {
      const size_t offset = tokens_[cur_++].offset;
      const bool negate = is_identifier("not");
      if (negate) ++cur_;
      NodePtr test = primary();
      if (test->kind != NodeKind::kIdentifier) fail("expected an identifier for the test");
      NodePtr t = make(NodeKind::kTest, offset, test->text);
      t->flag = negate;
      t->kids.push_back(std::move(operand));
      operand = std::move(t);
    }
    return operand;
  }
  NodePtr filter_expression() {
    NodePtr operand = unary_sign();
    while (is(T::kPipe)) {
      const size_t offset = tokens_[cur_++].offset;
      NodePtr filter = primary();
      if (filter->kind != NodeKind::kIdentifier) fail("expected an identifier for the filter");
      if (is(T::kOpenParen)) filter = call(std::move(filter));
      NodePtr f = make(NodeKind::kFilter, offset);
      f->kids.push_back(std::move(operand));
      f->kids.push_back(std::move(filter));
      operand = std::move(f);
    }
    return operand;
  }
  NodePtr unary_sign() {
    Nest nest(*this);
    if ((is(T::kUnary) || is(T::kAdditive)) && (tok().value == "-" || tok().value == "+")) {
      const Token& op = tokens_[cur_++];
      NodePtr u = make(NodeKind::kUnary, op.offset, op.value);
      u->kids.push_back(unary_sign());
      return u;
    }
    NodePtr m = member(primary());
    return is(T::kOpenParen) ? call(std::move(m)) : std::move(m);
  }
  NodePtr call(NodePtr callee) {
    NodePtr c = make(NodeKind::kCall, callee->offset);
    c->kids.push_back(std::move(callee));
    for (auto& a : arguments(/*parameters=*/false)) c->kids.push_back(std::move(a));
    NodePtr e = member(std::move(c));
    return is(T::kOpenParen) ? call(std::move(e)) : std::move(e);
  }
  std::vector<NodePtr> arguments(bool parameters) {
    expect(T::kOpenParen, "(");
    std::vector<NodePtr> args;
    std::set<std::string> names;
    bool saw_keyword = false;
    while (!is(T::kCloseParen)) {
      if (is(T::kPower) || (is(T::kMultiplicative) && tok().value == "*"))
        fail("argument unpacking (* and **) is not supported");
      NodePtr arg = expression();
      if (is(T::kEquals)) {
        ++cur_;
        if (arg->kind != NodeKind::kIdentifier) fail("expected an identifier for a keyword argument");
        NodePtr kw = make(NodeKind::kKeywordArg, arg->offset, arg->text);
        kw->kids.push_back(expression());
        arg = std::move(kw);
      }
      if (parameters) {
        if (arg->kind != NodeKind::kIdentifier && arg->kind != NodeKind::kKeywordArg)
          fail("expected an identifier for a parameter");
        if (!names.insert(arg->text).second) fail("duplicate parameter name " + arg->text);
      }
      if (arg->kind == NodeKind::kKeywordArg) saw_keyword = true;
      else if (saw_keyword) fail(parameters ? "non-default argument follows default argument"
                                            : "positional arguments must come before keyword arguments");
      args.push_back(std::move(arg));
      if (is(T::kComma)) ++cur_;
    }
    expect(T::kCloseParen, ")");
    return args;
  }
  NodePtr subscript() {  // inside [...]: an index or a slice
    std::vector<NodePtr> parts;
    bool slice = false;
    const size_t offset = tok().offset;
    while (!is(T::kCloseBracket)) {
      if (is(T::kColon)) {
        parts.push_back(nullptr);
        ++cur_;
        slice = true;
      } else {
        parts.push_back(expression());
        if (is(T::kColon)) {
          ++cur_;
          slice = true;
        }
      }
    }
    if (parts.empty()) fail("expected an index or slice inside [ ]");
    if (!slice) return std::move(parts[0]);
    if (parts.size() > 3) fail("a slice takes at most 3 parts");
    NodePtr s = make(NodeKind::kSlice, offset);
    parts.resize(3);
    s->kids = std::move(parts);
    return s;
  }
  NodePtr member(NodePtr object) {
    while (is(T::kDot) || is(T::kOpenBracket)) {
      const bool computed = tokens_[cur_++].type == T::kOpenBracket;
      NodePtr property;
      if (computed) {
        property = subscript();
        expect(T::kCloseBracket, "]");
      } else {
        property = primary();
        if (property->kind != NodeKind::kIdentifier && property->kind != NodeKind::kInt)
          fail("expected an identifier or integer after '.'");
      }
      NodePtr m = make(NodeKind::kMember, object->offset);
      m->flag = computed;
      m->kids.push_back(std::move(object));
      m->kids.push_back(std::move(property));
      object = std::move(m);
    }
    return object;
  }
  NodePtr primary() {
    const Token& t = tok();
    ++cur_;
    switch (t.type) {
      case T::kNumber: {
        if (t.value.find('.') != std::string::npos) {
          NodePtr n = make(NodeKind::kFloat, t.offset);
          n->real = std::stod(t.value);
          return n;
        }
        NodePtr n = make(NodeKind::kInt, t.offset);
        try {
          n->integer = std::stoll(t.value);
        } catch (const std::exception&) {
          fail("integer literal out of range: " + t.value);
        }
        return n;
      }
      case T::kString: {
        std::string value = t.value;
        while (is(T::kString)) value += tokens_[cur_++].value;  // adjacent literals concatenate
        return make(NodeKind::kString, t.offset, value);
      }
      case T::kIdentifier: return make(NodeKind::kIdentifier, t.offset, t.value);
      case T::kOpenParen: {
        NodePtr e = expression_sequence(false);
        expect(T::kCloseParen, ")");
        return e;
      }
      case T::kOpenBracket: {
        NodePtr a = make(NodeKind::kArray, t.offset);
        while (!is(T::kCloseBracket)) {
          if (cur_ >= tokens_.size()) fail("unterminated list literal");
          a->kids.push_back(expression());
          if (is(T::kComma)) ++cur_;
        }
        ++cur_;
        return a;
      }
      case T::kOpenCurly: {
        NodePtr o = make(NodeKind::kObject, t.offset);
        while (!is(T::kCloseCurly)) {
          if (cur_ >= tokens_.size()) fail("unterminated dict literal");
          o->kids.push_back(expression());
          expect(T::kColon, "':' between key and value");
          o->kids.push_back(expression());
          if (is(T::kComma)) ++cur_;
        }
        ++cur_;
        return o;
      }
      default: --cur_; fail("unexpected token \"" + t.value + "\"");
    }
  }
};

}  // namespace

NodePtr parse(const std::vector<Token>& tokens) { return Parser(tokens).program(); }

}  // namespace ts::tok::jinja
