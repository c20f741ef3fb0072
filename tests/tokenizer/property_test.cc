// Randomised properties over the real tokenizers (fixed seeds): arbitrary bytes never crash encode (valid UTF-8
// round-trips to its NFC form, invalid input is a ts::Error), and for random id sequences, including stray
// byte-level and <0xNN> pieces that form invalid UTF-8, the streaming decoder yields exactly decode().
#include <random>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/unicode.h"

namespace ts::tok::testing {
namespace {

// A random string of code points drawn from ranges that stress the tokenizer: ASCII (with white space and
// punctuation), Latin with combining marks, CJK, Hangul jamo (which NFC composes), emoji and modifiers, spaces.
std::string random_text(std::mt19937& rng, int length) {
  static const std::pair<char32_t, char32_t> ranges[] = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xC0, 0x17F}, {0x300, 0x36F}, {0x4E00, 0x4FFF}, {0x1100, 0x1112},
      {0x1161, 0x1175}, {0x11A8, 0x11C2}, {0xAC00, 0xAC40}, {0x1F300, 0x1F64F}, {0x1F3FB, 0x1F3FF},
      {0x200B, 0x200D}, {0x2000, 0x200A}, {0x0600, 0x06FF}, {0x0900, 0x097F}, {0xFF01, 0xFF5E}};
  std::string out;
  for (int i = 0; i < length; ++i) {
    const auto& [lo, hi] = ranges[rng() % std::size(ranges)];
    utf8_append(out, char32_t(lo + rng() % (hi - lo + 1)));
  }
  return out;
}

class Properties : public ::testing::TestWithParam<std::string> {};

TEST_P(Properties, RandomTextRoundTripsAndRandomBytesNeverCrash) {
  const std::string family = GetParam();
  TS_REQUIRE_TOKENIZER(tokenizer_path(family));
  const Tokenizer& tok = shared_tokenizer(family);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = random_text(rng, 1 + int(rng() % 60));
    const std::vector<int32_t> ids = tok.encode(text);
    if (family == "qwen3" || family.rfind("tiny", 0) == 0) {  // byte-level: lossless up to NFC
      ASSERT_EQ(tok.decode(ids), normalize(text, NormalForm::NFC)) << "trial " << trial;
    } else {  // SentencePiece style adds one leading space and the decoder strips it again
      ASSERT_EQ(tok.decode(ids), text) << "trial " << trial;
    }
  }
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes(1 + rng() % 40, '\0');
    for (char& b : bytes) b = char(rng() % 256);
    try {
      tok.encode(bytes);
    } catch (const ts::Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 250);  // random bytes are almost never valid UTF-8
}

TEST_P(Properties, StreamingEqualsDecodeOnRandomIds) {
  const std::string family = GetParam();
  TS_REQUIRE_TOKENIZER(tokenizer_path(family));
  const Tokenizer& tok = shared_tokenizer(family);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (int32_t& id : ids) {
      // Mostly low ids, where the single bytes and <0xNN> pieces live, plus any id.
      id = rng() % 3 ? int32_t(rng() % 300) : int32_t(rng() % uint32_t(tok.vocab_size()));
    }
    for (bool skip : {false, true}) {
      StreamDecoder stream(tok, skip);
      std::string out;
      for (int32_t id : ids) {
        std::string part = stream.push(id);
        ASSERT_NO_THROW(check_utf8(part, "streamed part"));
        out += part;
      }
      out += stream.flush();
      ASSERT_EQ(out, tok.decode(ids, skip)) << "trial " << trial << " skip_special " << skip;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Properties, ::testing::Values("qwen3", "llama2", "llama2_metaspace", "tiny", "tiny_ignore_merges"));

}  // namespace
}  // namespace ts::tok::testing

namespace ts::tok::testing {
namespace {

// SentencePiece-style files are encoded word by word (split before each run of "▁") when the vocabulary makes
// that exact. Adding an unreachable token with "▁" inside turns the shortcut off; the ids must not change.
TEST(Properties, Llama2WordSplitShortcutChangesNothing) {
  TS_REQUIRE_TOKENIZER(tokenizer_path("llama2"));
  const Tokenizer& fast = shared_tokenizer("llama2");
  nlohmann::json j = nlohmann::json::parse(ts::read_text_file(tokenizer_path("llama2")));
  j["model"]["vocab"]["x\u2581y"] = 32000;  // no merge produces it, so only the shortcut is affected
  const Tokenizer whole = Tokenizer::from_json_text(j.dump(), "llama2 without the word-split shortcut");
  std::mt19937 rng(99);
  std::string long_text;
  for (int trial = 0; trial < 200; ++trial) {
    std::string text = random_text(rng, 1 + int(rng() % 80));
    for (size_t i = 0; i < text.size(); i += 7) text[i] = rng() % 3 ? ' ' : text[i];  // many word starts
    if (!utf8_lossy(text).compare(text)) {
      ASSERT_EQ(fast.encode(text), whole.encode(text)) << "trial " << trial;
      long_text += text;
    }
  }
  for (const auto& c : load_fixture("llama2_encode.json")) long_text += c.at("text").get<std::string>();
  EXPECT_EQ(fast.encode(long_text), whole.encode(long_text));
}

}  // namespace
}  // namespace ts::tok::testing
