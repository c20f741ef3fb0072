// Exact agreement with the reference tokenizer (@huggingface/tokenizers) on every fixture case: ids with special
// tokens recognised and treated as text, decode with and without special tokens, the round trip to NFC text, and
// the streaming decoder fed one id at a time.
#include <string>
#include <vector>

#include "fixtures.h"

namespace ts::tok::testing {
namespace {

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder stream(tok, skip_special);
  std::string out;
  for (int32_t id : ids) {
    std::string part = stream.push(id);
    // Each returned part must itself be complete UTF-8 (the point of streaming).
    EXPECT_NO_THROW(tok.encode(part)) << "stream returned incomplete UTF-8";
    out += part;
  }
  return out + stream.flush();
}

class GoldenEncode : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenEncode, MatchesReferenceOnEveryCase) {
  const std::string family = GetParam();
  TS_REQUIRE_TOKENIZER(tokenizer_path(family));
  const Tokenizer& tok = shared_tokenizer(family);
  const nlohmann::json cases = load_fixture(family + "_encode.json");
  ASSERT_GE(cases.size(), 30u);
  const bool byte_level = family == "qwen3" || family.rfind("tiny", 0) == 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(family + " case '" + c.at("name").get<std::string>() + "'");
    const std::string text = c.at("text");
    const std::vector<int32_t> expected = ids_of(c.at("ids"));
    const std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids, expected);
    EXPECT_EQ(tok.encode(text, /*parse_special=*/false), ids_of(c.at("ids_plain")));
    EXPECT_EQ(tok.decode(expected), c.at("decoded").get<std::string>());
    EXPECT_EQ(tok.decode(expected, /*skip_special=*/true), c.at("decoded_skip_special").get<std::string>());
    // Byte-level BPE loses nothing but the normalization (and the white space lstrip/rstrip tokens swallow).
    if (byte_level && c.at("name") != "tiny_strip_token") {
      EXPECT_EQ(tok.decode(ids), c.at("nfc").get<std::string>());
    }
    EXPECT_EQ(stream_decode(tok, expected, false), c.at("decoded").get<std::string>());
    EXPECT_EQ(stream_decode(tok, expected, true), c.at("decoded_skip_special").get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GoldenEncode, ::testing::Values("qwen3", "llama2", "llama2_metaspace", "tiny", "tiny_ignore_merges"));

}  // namespace
}  // namespace ts::tok::testing
