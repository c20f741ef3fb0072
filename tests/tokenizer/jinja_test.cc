// The chat-template interpreter feature by feature: small templates rendered against @huggingface/jinja's output
// (tests/data/tokenizer/jinja_cases.json, from tools/tokref/gen_chat_fixtures.mjs), the deliberate differences
// (Python's strip(chars)), provenance of output bytes, and clear errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/jinja.h"
#include "tokenizer/jinja_lexer.h"

namespace ts::tok::jinja {
namespace {

std::string render(const std::string& source, const Object& vars = {}) { return Template(source).render(vars).bytes; }

TEST(Jinja, CasesMatchHuggingFaceJinja) {
  const auto f = nlohmann::ordered_json::parse(ts::read_text_file(ts::tok::testing::fixture_path("jinja_cases.json")));
  const Value vars = from_json(f.at("variables"));
  int rendered = 0, errors = 0;
  for (const auto& c : f.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const std::string source = c.at("source");
    if (c.contains("error")) {
      EXPECT_THROW(Template(source).render(*vars.object), ts::Error);
      ++errors;
    } else {
      EXPECT_EQ(Template(source).render(*vars.object).bytes, c.at("rendered").get<std::string>());
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 35);
  EXPECT_GE(errors, 4);
}

TEST(Jinja, ErrorsSayWhatFailed) {
  auto message = [](const std::string& source) -> std::string {
    try {
      render(source);
    } catch (const ts::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message("{{ raise_exception('Conversation roles must alternate') }}").find(
                "chat template raised an exception: Conversation roles must alternate"),
            std::string::npos);
  EXPECT_NE(message("{% if x %}no end").find("syntax error"), std::string::npos);
  EXPECT_NE(message("{% frobnicate %}").find("unknown or unsupported statement \"frobnicate\""), std::string::npos);
  EXPECT_NE(message("{{ 'unterminated }}").find("syntax error"), std::string::npos);
  EXPECT_NE(message("{{ 1 | nosuchfilter }}").find("unknown filter \"nosuchfilter\""), std::string::npos);
  EXPECT_NE(message("{{ 1 is nosuchtest }}").find("unknown test \"nosuchtest\""), std::string::npos);
  EXPECT_NE(message("{{ '\\q' }}").find("unexpected escaped character"), std::string::npos);
  EXPECT_NE(message("{% for x in 3 %}{% endfor %}").find("expected a list or mapping"), std::string::npos);
  EXPECT_NE(message("{{ 'a' | indent(1000000000000) }}").find("wider than"), std::string::npos);
}

// indent() with a negative width indents by nothing, as Python's ' ' * width (it used to throw std::length_error).
TEST(Jinja, IndentWithNegativeWidthIsPythons) {
  EXPECT_EQ(render("[{{ 'a\nb' | indent(-1) }}]"), "[a\nb]");
  EXPECT_EQ(render("[{{ 'a\nb' | indent(2) }}]"), "[a\n  b]");
}

// Where @huggingface/jinja departs from Python's Jinja (what models were trained with), Python wins.
TEST(Jinja, StripWithCharactersIsPythons) {
  EXPECT_EQ(render("[{{ '\\n\\n  x \\n'.lstrip('\\n') }}]"), "[  x \n]");
  EXPECT_EQ(render("[{{ '\\n  x \\n\\n'.rstrip('\\n') }}]"), "[\n  x ]");
  EXPECT_EQ(render("[{{ 'xxhixy'.strip('xy') }}]"), "[hi]");
  EXPECT_EQ(render("[{{ ' \\t x \\n'.strip() }}]"), "[x]");  // no argument: all white space
}

TEST(Jinja, StringsCountCodePoints) {
  EXPECT_EQ(render("{{ 'a😀b' | length }} {{ 'a😀b'[1] }} {{ 'a😀b'[::-1] }}"), "3 😀 b😀a");
}

TEST(Jinja, OutputRemembersWhichBytesCameFromTheCaller) {
  Object vars;
  vars.emplace_back("messages", from_json(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])")));
  vars.emplace_back("bos", Value::of_string("<s>"));
  const Text out = Template("{{ bos }}{% for m in messages %}[{{ m.role | upper }}:{{ m.content ~ '!' }}]{% endfor %}")
                       .render(vars);
  ASSERT_EQ(out.bytes, "<s>[USER:hi!]");
  std::string marks;
  for (size_t i = 0; i < out.bytes.size(); ++i) marks += out.input_at(i) ? 'i' : 't';
  EXPECT_EQ(marks, "tttt" "iiii" "t" "ii" "tt");
}

TEST(Jinja, PreprocessLikeTheReference) {
  EXPECT_EQ(preprocess("a\n  {% if x %}\nb\n"), "a\n{% if x %}b");  // lstrip_blocks, trim_blocks, last newline
  EXPECT_EQ(preprocess("x  {%- generation -%}  y"), "xy");
  EXPECT_EQ(js_trim_end("a \u3000\n"), "a");
  EXPECT_EQ(js_trim_start("\ufeff b"), "b");
}

TEST(Jinja, JavaScriptNumbers) {
  EXPECT_EQ(js_number(1), "1");
  EXPECT_EQ(js_number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(js_number(1e21), "1e+21");
  EXPECT_EQ(js_number(1.5e-7), "1.5e-7");
  EXPECT_EQ(js_number(-123.25), "-123.25");
  EXPECT_EQ(js_number(1e-6), "0.000001");
  EXPECT_EQ(render("{{ 0.5 + 0.25 }} {{ 3.0 }} {{ 1.0 ~ '' }} {{ [1.5] | tojson }}"), "0.75 3.0 1 [1.5]");
}

}  // namespace
}  // namespace ts::tok::jinja

namespace ts::tok::jinja {
namespace {

// Mutated real templates (bytes deleted, duplicated, replaced by template punctuation) either render or throw
// ts::Error: never a crash, a hang or another exception. Deep nesting and runaway recursion are errors too.
TEST(Jinja, MutatedTemplatesFailCleanly) {
  const auto f = nlohmann::ordered_json::parse(ts::read_text_file(ts::tok::testing::fixture_path("chat_templates.json")));
  const Value messages = from_json(nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "<think>a</think> b"},
          {"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
          {"role": "tool", "content": "r"}, {"role": "user", "content": "q"}])"));
  const Object vars = {{"messages", messages}, {"add_generation_prompt", Value::of(true)},
                       {"bos_token", Value::of_string("<s>")}, {"eos_token", Value::of_string("</s>")}};
  const char* alphabet[] = {"{", "}", "%", "(", ")", "[", "]", "'", "\"", "|", "-", ".", ":", ",", "\\", "{{", "{%",
                            "%}", "}}", " if ", " for ", " in ", " endfor ", " endif ", " set ", " not ", "~", "*"};
  uint64_t state = 12345;
  auto next = [&] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  int rendered = 0, failed = 0;
  for (const auto& [name, t] : f.at("templates").items()) {
    const std::string source = t.at("source");
    for (int trial = 0; trial < 300; ++trial) {
      std::string s = source;
      for (int edits = 1 + int(next() % 4); edits > 0 && !s.empty(); --edits) {
        const size_t pos = next() % s.size();
        switch (next() % 3) {
          case 0: s.erase(pos, 1 + next() % 8); break;
          case 1: s.insert(pos, s.substr(pos, 1 + next() % 16)); break;
          default: s.insert(pos, alphabet[next() % (sizeof(alphabet) / sizeof(alphabet[0]))]);
        }
      }
      try {
        Template(s).render(vars);
        ++rendered;
      } catch (const ts::Error&) {
        ++failed;
      }
    }
  }
  EXPECT_GT(rendered, 50);
  EXPECT_GT(failed, 500);

  std::string deep = "{{ ";
  for (int i = 0; i < 5000; ++i) deep += "(";
  EXPECT_THROW(Template(deep + "1" + std::string(5000, ')') + " }}"), ts::Error);
  EXPECT_THROW(Template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render({}), ts::Error);
  EXPECT_THROW(Template("{% for i in range(100000000) %}{% endfor %}").render({}), ts::Error);
  // Real nesting is far below the limits: a recursive macro 20 deep is fine.
  EXPECT_EQ(Template("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}")
                .render({})
                .bytes,
            "2019181716151413121110987654321");
}

}  // namespace
}  // namespace ts::tok::jinja
