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
