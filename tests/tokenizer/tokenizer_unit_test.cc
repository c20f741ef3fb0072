// Behaviour beyond the golden cases: UTF-8 handling, the streaming decoder's hold-back, vocabulary queries,
// load errors, and concurrent use.
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/unicode.h"

namespace ts::tok::testing {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, LossyReplacesMaximalInvalidSubparts) {
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE4\xBD" "a"), kFFFD + "a");        // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), kFFFD + kFFFD);          // bytes that never occur: one each
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);  // a surrogate: not a valid prefix
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), kFFFD);
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), kFFFD + kFFFD);          // overlong
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8, IncompleteTailIsOnlyAValidPrefix) {
  EXPECT_EQ(utf8_incomplete_tail("ab"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD\xA0"), 0u);  // complete
  EXPECT_EQ(utf8_incomplete_tail("a\xED\xA0"), 0u);      // can never complete: emit now as U+FFFD
  EXPECT_EQ(utf8_incomplete_tail("a\xFF"), 0u);
}

TEST(Tokenizer, InvalidUtf8InputIsAClearError) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_path("tiny"));
  try {
    tok.encode("ok \xC3\x28 bad");
    FAIL() << "expected ts::Error";
  } catch (const ts::Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), ts::Error);  // surrogate
  EXPECT_THROW(tok.encode(std::string("a\xF4\x90\x80\x80")), ts::Error);  // above U+10FFFF
}

TEST(Tokenizer, Qwen3VocabularyQueries) {
  TS_REQUIRE_TOKENIZER(tokenizer_path("qwen3"));
  const Tokenizer& tok = shared_tokenizer("qwen3");
  EXPECT_EQ(tok.vocab_size(), 151669);  // 151643 BPE tokens + 26 added
  EXPECT_EQ(tok.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_text(151645), "<|im_end|>");
  EXPECT_EQ(tok.token_text(tok.token_id("\xC4\xA0the")), "\xC4\xA0the");  // "Ġthe"
  EXPECT_EQ(tok.token_id("definitely not a token"), -1);
  EXPECT_TRUE(tok.is_special(151643));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is an added token but not special
  EXPECT_TRUE(tok.added_prefix_ids().empty());
  EXPECT_THROW(tok.token_text(151669), ts::Error);
  EXPECT_THROW(tok.decode({1, -5}), ts::Error);
  EXPECT_THROW(tok.decode({200000}), ts::Error);
}

TEST(Tokenizer, Llama2AddsBosOnlyThroughThePostProcessorIds) {
  TS_REQUIRE_TOKENIZER(tokenizer_path("llama2"));
  const Tokenizer& tok = shared_tokenizer("llama2");
  EXPECT_EQ(tok.added_prefix_ids(), std::vector<int32_t>{1});
  EXPECT_TRUE(tok.added_suffix_ids().empty());
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.token_id("<0x0A>"), 13);
}

TEST(StreamDecoder, HoldsBackPartialCharactersAcrossTokens) {
  TS_REQUIRE_TOKENIZER(tokenizer_path("qwen3"));
  const Tokenizer& tok = shared_tokenizer("qwen3");
  const std::string text = "\xF0\x93\x80\x80 \xEA\x99\xAE \xF0\x9F\xA6\x9C";  // 𓀀 ꙮ 🦜: rare, split mid-character
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_GE(ids.size(), 4u);
  StreamDecoder stream(tok);
  std::string out;
  int held_back = 0;  // pushes that returned nothing because the character was incomplete
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string part = stream.push(ids[i]);
    EXPECT_NO_THROW(check_utf8(part, "streamed part"));
    held_back += part.empty();
    out += part;
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
  EXPECT_GE(held_back, 2);
  EXPECT_EQ(StreamDecoder(tok).push(ids[0]), "");  // the first token alone is not a whole character

  // Generation stopped mid-character: flush() turns the dangling bytes into U+FFFD, like decode().
  StreamDecoder cut(tok);
  std::string partial = cut.push(ids[0]);
  partial += cut.flush();
  EXPECT_EQ(partial, tok.decode({ids[0]}));
  EXPECT_NE(partial.find(kFFFD), std::string::npos);
}

TEST(StreamDecoder, Llama2LeadingSpaceIsStrippedOnce) {
  TS_REQUIRE_TOKENIZER(tokenizer_path("llama2"));
  const Tokenizer& tok = shared_tokenizer("llama2");
  const std::vector<int32_t> ids = tok.encode("Hello world");  // [▁Hello, ▁world]
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "Hello");
  EXPECT_EQ(stream.push(ids[1]), " world");
  EXPECT_EQ(stream.flush(), "");
}

TEST(Tokenizer, LoadErrorsSayWhatIsWrong) {
  auto message = [](const std::string& json) {
    try {
      Tokenizer::from_json_text(json, "test.json");
    } catch (const ts::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message("{}").find("no \"model\""), std::string::npos);
  EXPECT_NE(message(R"({"model": {"type": "WordPiece", "vocab": {}}})").find("not supported"), std::string::npos);
  EXPECT_NE(message(R"({"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})")
                .find("BertNormalizer"),
            std::string::npos);
  EXPECT_NE(message(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})").find("missing"),
            std::string::npos);
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), ts::Error);
  EXPECT_THROW(Tokenizer().encode("never loaded"), ts::Error);
}

TEST(Tokenizer, ConcurrentEncodesAgreeWithSerial) {
  TS_REQUIRE_TOKENIZER(tokenizer_path("qwen3"));
  const Tokenizer& tok = shared_tokenizer("qwen3");
  const nlohmann::json cases = load_fixture("qwen3_encode.json");
  std::vector<std::vector<int32_t>> results[2];
  auto work = [&](int t) {
    for (int rep = 0; rep < 3; ++rep)
      for (const auto& c : cases) results[t].push_back(tok.encode(c.at("text").get<std::string>()));
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_EQ(results[0][i], results[1][i]);
    EXPECT_EQ(results[0][i], cases[i % cases.size()].at("ids").get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace ts::tok::testing
