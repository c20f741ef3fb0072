// Tokenizers built from GGUF metadata (io/gguf_tokenizer.h) against the tokenizer.json they were converted from.
//
// The committed tiny BPE GGUF (tests/data/gguf_model/tiny_bpe_tokenizer.gguf) always runs. The real vocabularies
// (Qwen3, Qwen2.5, Llama-3, Llama-3.1) are MBs and their tokenizer.json files are fetched into .cache/, so their
// GGUFs are made on demand into the build folder by tools/py/make_gguf_model_fixtures.py (llama.cpp's gguf-py,
// converting as convert_hf_to_gguf.py does); those tests skip when the fetched files, gguf-py or /usr/bin/python3
// with numpy are missing.
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "fixtures.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/unicode.h"

namespace ts::tok::testing {
namespace {

namespace fs = std::filesystem;

// The GGUF for a fetched family, made (or remade when older than its inputs) in the build folder; "" with
// `why` set when it cannot be made here.
std::string family_gguf(const std::string& family, std::string& why) {
  const std::string source = cache_dir(family) + "/tokenizer.json";
  const std::string script = std::string(TS_SOURCE_DIR) + "/tools/py/make_gguf_model_fixtures.py";
  const std::string out = std::string(TS_BINARY_DIR) + "/gguf_tokenizers/" + family + ".gguf";
  if (!file_exists(source)) {
    why = "missing " + source + " (scripts/fetch-test-assets.sh fetches it)";
    return "";
  }
  std::error_code ec;
  if (fs::exists(out, ec) && fs::last_write_time(out, ec) >= fs::last_write_time(source, ec) &&
      fs::last_write_time(out, ec) >= fs::last_write_time(script, ec))
    return out;
  if (!file_exists("/usr/bin/python3")) {
    why = "no /usr/bin/python3 to write " + out;
    return "";
  }
  const std::string command = "/usr/bin/python3 '" + script + "' tokenizer " + family + " '" + out + "' 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    why = "cannot run " + command;
    return "";
  }
  std::string output;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) output.append(chunk, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && file_exists(out)) return out;
  why = command + " failed (exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "): " + output;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return "";  // an input is missing: skip
  ADD_FAILURE() << why;
  return "";
}

struct Pair {
  Tokenizer from_json, from_gguf;
  io::GgufTokenizerInfo info;
};

// Both tokenizers of a family, loaded once per test binary. `gguf_path` "" = the family's generated GGUF.
const Pair* load_pair(const std::string& family, const std::string& json_path, const std::string& gguf_path,
                      std::string& why) {
  static std::map<std::string, Pair> loaded;
  auto it = loaded.find(family);
  if (it != loaded.end()) return &it->second;
  const std::string path = gguf_path.empty() ? family_gguf(family, why) : gguf_path;
  if (path.empty()) return nullptr;
  const io::GgufFile gguf(path);
  Pair pair{Tokenizer::from_file(json_path), Tokenizer::from_json(io::tokenizer_json_from_gguf(gguf), path),
            io::gguf_tokenizer_info(gguf)};
  return &loaded.emplace(family, std::move(pair)).first->second;
}

// property_test.cc's generator: code points from ranges that stress the tokenizer.
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

// The corpus: every text of the committed golden fixtures, each family's special tokens inline, random texts.
std::vector<std::string> corpus(const Tokenizer& tok) {
  std::vector<std::string> texts;
  for (const char* file : {"qwen3_encode.json", "tiny_encode.json", "llama2_encode.json"})
    for (const auto& c : load_fixture(file)) texts.push_back(c.at("text").get<std::string>());
  const nlohmann::json whitespace = load_fixture("whitespace_encode.json");  // {family: [cases]}
  for (const auto& [family, cases] : whitespace.items())
    for (const auto& c : cases) texts.push_back(c.at("text").get<std::string>());
  std::string specials;
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_special(id)) specials += tok.token_text(id) + " x" + std::to_string(id) + "\n";
  texts.push_back(specials);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) texts.push_back(random_text(rng, 1 + int(rng() % 60)));
  return texts;
}

// Added tokens whose special flag the conversion changes: the converter marks an added token CONTROL when the
// file says special *or* it looks special (<|...|>), so e.g. Qwen's <|fim_prefix|> (special: false) becomes special.
std::vector<std::string> special_flag_changes(const Pair& p) {
  std::vector<std::string> changed;
  for (int32_t id = 0; id < p.from_json.vocab_size(); ++id)
    if (p.from_json.is_special(id) != p.from_gguf.is_special(id)) changed.push_back(p.from_json.token_text(id));
  return changed;
}

void expect_same_tokenizer(const Pair& p, const std::set<std::string>& skip_texts_with) {
  const Tokenizer& a = p.from_json;
  const Tokenizer& b = p.from_gguf;
  ASSERT_EQ(a.vocab_size(), b.vocab_size());
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    ASSERT_EQ(a.token_text(id), b.token_text(id)) << "id " << id;
    ASSERT_EQ(a.piece_bytes(id), b.piece_bytes(id)) << "id " << id;
  }
  const std::vector<std::string> changed = special_flag_changes(p);
  for (const std::string& t : changed)
    EXPECT_TRUE(t.size() > 4 && t.rfind("<|", 0) == 0 && t.compare(t.size() - 2, 2, "|>") == 0)
        << "special flag of " << t << " changed although it does not look special";
  int compared = 0;
  for (const std::string& text : corpus(a)) {
    bool skip = false;
    for (const std::string& s : skip_texts_with) skip = skip || text.find(s) != std::string::npos;
    if (skip) continue;
    SCOPED_TRACE("text: " + text.substr(0, 80));
    const std::vector<int32_t> ids = a.encode(text);
    ASSERT_EQ(b.encode(text), ids);
    bool plain_differs = false;  // parse_special=false differs exactly where a changed flag's text occurs
    for (const std::string& t : changed) plain_differs = plain_differs || text.find(t) != std::string::npos;
    if (!plain_differs) {
      ASSERT_EQ(b.encode(text, /*parse_special=*/false), a.encode(text, false));
    }
    ASSERT_EQ(b.decode(ids), a.decode(ids));
    ++compared;
  }
  EXPECT_GT(compared, 400);
}

TEST(GgufTokenizer, TinyBpeEncodesAsItsTokenizerJsonAndTheReference) {
  std::string why;
  const Pair* p = load_pair("tiny", fixture_path("tiny_bpe/tokenizer.json"),
                            std::string(TS_TEST_DATA) + "/gguf_model/tiny_bpe_tokenizer.gguf", why);
  ASSERT_NE(p, nullptr) << why;
  // [STRIP] has lstrip / rstrip in tokenizer.json; GGUF has no such flags (llama.cpp sets them by token name).
  expect_same_tokenizer(*p, {"[STRIP]"});
  for (const auto& c : load_fixture("tiny_encode.json")) {
    if (c.at("name") == "tiny_strip_token") continue;
    SCOPED_TRACE(c.at("name").get<std::string>());
    EXPECT_EQ(p->from_gguf.encode(c.at("text").get<std::string>()), c.at("ids").get<std::vector<int32_t>>());
  }
  EXPECT_EQ(p->info.pre, "qwen2");
  EXPECT_TRUE(p->from_gguf.added_prefix_ids().empty());
}

class GgufTokenizerFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizerFamily, EncodesAsItsTokenizerJson) {
  const std::string family = GetParam();
  std::string why;
  const Pair* p = load_pair(family, tokenizer_path(family), "", why);
  if (!p) GTEST_SKIP() << why;
  expect_same_tokenizer(*p, {});
  const bool llama = family.rfind("llama", 0) == 0;
  EXPECT_EQ(p->info.pre, llama ? "llama-bpe" : "qwen2");
}

TEST_P(GgufTokenizerFamily, ChatTemplateAndSpecialIds) {
  const std::string family = GetParam();
  std::string why;
  const Pair* p = load_pair(family, tokenizer_path(family), "", why);
  if (!p) GTEST_SKIP() << why;
  const nlohmann::json config =
      nlohmann::json::parse(read_text_file(cache_dir(family) + "/tokenizer_config.json"));
  EXPECT_EQ(p->info.chat_template, config.at("chat_template").get<std::string>());
  const std::string eos = config.at("eos_token").is_string() ? config.at("eos_token").get<std::string>() : "";
  EXPECT_EQ(p->info.eos_token, eos);
  EXPECT_EQ(p->info.eos_id, p->from_json.token_id(eos));
  if (family == "llama3_1") {  // TemplateProcessing with <|begin_of_text|> -> add_bos_token
    EXPECT_TRUE(p->info.add_bos);
    EXPECT_EQ(p->from_gguf.added_prefix_ids(), std::vector<int32_t>{128000});
  }
  // The template from the GGUF renders as the folder's.
  const io::GgufFile gguf(family_gguf(family, why));
  const ChatTemplate from_gguf =
      ChatTemplate::from_config_text(io::tokenizer_config_json_from_gguf(gguf).dump(), gguf.path());
  const ChatTemplate from_dir = ChatTemplate::from_model_dir(cache_dir(family));
  const std::vector<ChatMessage> msgs = parse_chat_messages(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_start|> there"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2 + 2?"}])");
  EXPECT_EQ(from_gguf.render(msgs, true, false), from_dir.render(msgs, true, false));
  EXPECT_EQ(from_gguf.encode_chat(p->from_gguf, msgs, true, false), from_dir.encode_chat(p->from_json, msgs, true, false));
}

INSTANTIATE_TEST_SUITE_P(Fetched, GgufTokenizerFamily, ::testing::Values("qwen3", "qwen2_5", "llama3", "llama3_1"));

// --- refusals --------------------------------------------------------------------------------------------------

std::string error_building(const std::string& from, const std::string& to) {
  std::string bytes = read_text_file(std::string(TS_TEST_DATA) + "/gguf_model/tiny_bpe_tokenizer.gguf");
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return "";
  bytes.replace(at, from.size(), to);
  try {
    const io::GgufFile f = io::GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "edited.gguf");
    io::tokenizer_json_from_gguf(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GgufTokenizer, RefusesUnknownPreAndModelByName) {
  // The values as stored: u64 length, then the bytes.
  std::string msg = error_building(std::string("\x05\0\0\0\0\0\0\0qwen2", 13), std::string("\x05\0\0\0\0\0\0\0qwenX", 13));
  EXPECT_NE(msg.find("edited.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.ggml.pre 'qwenX'"), std::string::npos) << msg;
  msg = error_building(std::string("\x04\0\0\0\0\0\0\0gpt2", 12), std::string("\x04\0\0\0\0\0\0\0t5xx", 12));
  EXPECT_NE(msg.find("tokenizer.ggml.model 't5xx'"), std::string::npos) << msg;
  msg = error_building("tokenizer.ggml.tokens", "tokenizer.ggml.tokenX");
  EXPECT_NE(msg.find("tokenizer.ggml.tokens"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ts::tok::testing
