// Lexer of the chat-template interpreter: the template text -> tokens, exactly as @huggingface/jinja's
// tokenize() does it, including its preprocessing (lstrip_blocks and trim_blocks on, as transformers renders
// chat templates; one trailing newline dropped; {% generation %} tags removed) and the white-space control of
// {%- -%} / {{- -}} / {#- -#}.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ts::tok::jinja {

enum class TokenType {
  kText, kNumber, kString, kIdentifier, kEquals, kOpenParen, kCloseParen, kOpenStatement, kCloseStatement,
  kOpenExpression, kCloseExpression, kOpenBracket, kCloseBracket, kOpenCurly, kCloseCurly, kComma, kDot, kColon,
  kPipe, kAdditive, kMultiplicative, kPower, kComparison, kUnary, kComment,
};

struct Token {
  TokenType type;
  std::string value;  // text, literal (escapes resolved), identifier or operator
  size_t offset;      // byte offset in the preprocessed template (for error messages)
};

// JavaScript's \s (what the reference uses for white-space control and trim()).
bool is_js_space(char32_t cp);
std::string js_trim_start(const std::string& s);
std::string js_trim_end(const std::string& s);

std::string preprocess(std::string source);
// Throws ts::Error ("chat template syntax error: ...") on malformed input.
std::vector<Token> tokenize(const std::string& source);

}  // namespace ts::tok::jinja
