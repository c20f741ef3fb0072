// White space in split regexes as Hugging Face reads it: \s is Unicode White_Space (Rust regex / Oniguruma, and
// @huggingface/tokenizers, which rewrites \s to \p{White_Space}); PCRE2's own \s also matches U+180E. Every
// White_Space code point and the usual look-alikes (U+180E, U+200B..U+200D, U+2060, U+FEFF, U+001C..U+001F),
// in several positions, against the reference ids (tests/data/tokenizer/whitespace_encode.json).
#include "fixtures.h"
#include "tokenizer/regex.h"

namespace ts::tok::testing {
namespace {

TEST(WhiteSpace, SplitRegexMatchesHuggingFace) {
  const nlohmann::json f = load_fixture("whitespace_encode.json");
  int compared = 0;
  for (const std::string name : {"qwen3", "llama3"}) {
    TS_REQUIRE_TOKENIZER(tokenizer_path(name));
    const Tokenizer& tok = shared_tokenizer(name);
    for (const auto& c : f.at(name)) {
      SCOPED_TRACE(name + " " + c.at("name").get<std::string>());
      EXPECT_EQ(tok.encode(c.at("text").get<std::string>()), c.at("ids").get<std::vector<int32_t>>());
      ++compared;
    }
  }
  EXPECT_GE(compared, 2 * 100);
}

TEST(WhiteSpace, MongolianVowelSeparatorIsNotSpace) {
  // "x \u180e!": U+180E is not white space, so " \u180e!" is one punctuation piece.
  const Regex split(R"( ?[^\s\p{L}\p{N}]+|\s+)");
  std::vector<std::pair<size_t, size_t>> m;
  split.find_all("x \u180e!", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{1, 6}));  // " " + 3-byte U+180E + "!"
}

TEST(WhiteSpace, PatternRewrite) {
  EXPECT_EQ(hf_white_space_pattern(R"(\s+(?!\S)|[^\s\p{L}])"), R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}])");
  EXPECT_EQ(hf_white_space_pattern(R"(\\s\n\S)"), R"(\\s\n\P{White_Space})");  // an escaped backslash stays
}

}  // namespace
}  // namespace ts::tok::testing
