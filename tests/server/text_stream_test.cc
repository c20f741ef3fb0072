// TextStream: incremental text with stop strings held back across token boundaries, hidden ids, and the
// concatenation invariant.
#include <gtest/gtest.h>

#include "server/server_fixture.h"
#include "server/text_stream.h"

namespace ts::server::testing {
namespace {

std::string run(const tok::Tokenizer& t, const std::vector<int32_t>& ids, std::vector<std::string> stop,
                std::vector<std::string>* pieces = nullptr, bool* stopped = nullptr) {
  TextStream s(t, {}, std::move(stop));
  std::string out;
  for (int32_t id : ids) {
    std::string p = s.push(id);
    if (pieces) pieces->push_back(p);
    out += p;
  }
  out += s.finish();
  if (stopped) *stopped = s.stopped();
  return out;
}

TEST(TextStream, WithoutStopStringsEqualsDecode) {
  const tok::Tokenizer& t = SharedTokenizer::get().tokenizer;
  for (const char* text : {"plain words here", "caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac 42", "emoji \xf0\x9f\x98\x80!"}) {
    auto ids = t.encode(text);
    EXPECT_EQ(run(t, ids, {}), t.decode(ids)) << text;
  }
}

TEST(TextStream, StopStringSpanningTokensIsCutAndNeverLeaks) {
  const tok::Tokenizer& t = SharedTokenizer::get().tokenizer;
  auto ids = t.encode("alpha beta gamma delta");
  std::vector<std::string> pieces;
  bool stopped = false;
  // "a gam" spans the end of "beta" and the start of "gamma".
  EXPECT_EQ(run(t, ids, {"a gam"}, &pieces, &stopped), "alpha bet");
  EXPECT_TRUE(stopped);
  for (const std::string& p : pieces) EXPECT_EQ(p.find("gam"), std::string::npos) << "leaked: " << p;
}

TEST(TextStream, EarliestOfSeveralStopStringsWins) {
  const tok::Tokenizer& t = SharedTokenizer::get().tokenizer;
  auto ids = t.encode("one two three four");
  EXPECT_EQ(run(t, ids, {"four", "two"}), "one ");
}

TEST(TextStream, PartialMatchAtTheEndIsReleased) {
  const tok::Tokenizer& t = SharedTokenizer::get().tokenizer;
  auto ids = t.encode("the end is nea");
  bool stopped = true;
  EXPECT_EQ(run(t, ids, {"near"}, nullptr, &stopped), "the end is nea");
  EXPECT_FALSE(stopped);
}

TEST(TextStream, HeldBackPrefixWaitsForTheNextToken) {
  const tok::Tokenizer& t = SharedTokenizer::get().tokenizer;
  auto ids = t.encode("hello world");
  TextStream s(t, {}, {"o w"});
  std::string first;
  for (int32_t id : ids) first += s.push(id);
  EXPECT_EQ(first, "hell");  // "o w" matched: cut
  EXPECT_TRUE(s.stopped());
}

TEST(TextStream, HiddenIdsProduceNoText) {
  const SharedTokenizer& st = SharedTokenizer::get();
  const int32_t im_end = st.tokenizer.token_id("<|im_end|>");
  ASSERT_GE(im_end, 0);
  TextStream s(st.tokenizer, {im_end}, {});
  std::string out;
  for (int32_t id : st.tokenizer.encode("ok")) out += s.push(id);
  out += s.push(im_end);
  out += s.finish();
  EXPECT_EQ(out, "ok");
}

// Special added tokens (<|im_start|>) give no text unless the request asks for them (skip_special_tokens false).
TEST(TextStream, SpecialTokensAreSkippedUnlessAskedFor) {
  const SharedTokenizer& st = SharedTokenizer::get();
  const int32_t im_start = st.tokenizer.token_id("<|im_start|>");
  ASSERT_GE(im_start, 0);
  ASSERT_TRUE(st.tokenizer.is_special(im_start));
  for (bool skip : {true, false}) {
    TextStream s(st.tokenizer, {}, {}, skip);
    std::string out;
    out += s.push(im_start);
    for (int32_t id : st.tokenizer.encode("ok")) out += s.push(id);
    out += s.finish();
    EXPECT_EQ(out, skip ? "ok" : "<|im_start|>ok");
  }
}

TEST(TextStream, MultibyteCharacterSplitAcrossTokensIsNotEmittedHalfway) {
  const tok::Tokenizer& t = SharedTokenizer::get().tokenizer;
  // Byte-level BPE may split a rare character into byte tokens; every piece must be valid UTF-8 on its own.
  auto ids = t.encode("\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x99");
  std::vector<std::string> pieces;
  run(t, ids, {"zz"}, &pieces);
  for (const std::string& p : pieces) {
    nlohmann::json j = p;  // throws on invalid UTF-8 when dumped strictly
    EXPECT_NO_THROW((void)j.dump()) << "piece is not valid UTF-8";
  }
}

}  // namespace
}  // namespace ts::server::testing
