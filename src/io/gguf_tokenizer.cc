#include "io/gguf_tokenizer.h"

#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace ts::io {

namespace {

using nlohmann::json;

// tokenizer.ggml.token_type values (llama.h llama_token_type / gguf-py TokenType).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The split regexes of the tokenizer.json files behind each pre name (their "pre_tokenizer" Split patterns).
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerSpec {
  const char* regex;
  bool nfc;            // the tokenizer.json has an NFC normalizer
  bool ignore_merges;  // a word found whole in the vocabulary is one token (Llama-3)
};

bool pre_spec(const std::string& pre, PreTokenizerSpec& out) {
  if (pre == "qwen2") {
    out = {kQwen2Regex, true, false};
    return true;
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    out = {kLlama3Regex, false, true};
    return true;
  }
  return false;
}

int32_t token_id_key(const GgufFile& f, const char* key) {
  if (!f.has(key)) return -1;
  const uint32_t id = f.get_u32(key);
  TS_CHECK(id < (1u << 31), f.path(), ": key '", key, "' is not a token id: ", id);
  return int32_t(id);
}

std::vector<int64_t> token_types(const GgufFile& f, size_t n_tokens) {
  if (!f.has("tokenizer.ggml.token_type")) return std::vector<int64_t>(n_tokens, kNormal);
  std::vector<int64_t> types = f.get_ints("tokenizer.ggml.token_type");
  TS_CHECK(types.size() == n_tokens, f.path(), ": key 'tokenizer.ggml.token_type' has ", types.size(),
           " entries for ", n_tokens, " tokens");
  return types;
}

// tokenizer.json's "model" and "added_tokens" parts of a GGUF vocabulary.
struct SplitVocabulary {
  json vocab = json::object();  // {text: id} of normal, unknown and byte tokens
  json added = json::array();   // control and user-defined tokens, as tokenizer.json's added_tokens
};

// Sorts tokens[id] by types[id] (both [n_tokens]): normal, unknown and byte tokens into the vocabulary (their texts
// must be distinct), control and user-defined ones into the added tokens; unused ones are dropped.
SplitVocabulary split_vocabulary(const GgufFile& f, const std::vector<std::string>& tokens,
                                 const std::vector<int64_t>& types) {
  SplitVocabulary out;
  std::unordered_map<std::string, size_t> seen;  // vocabulary text -> id, for duplicates
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types[id];
    switch (type) {
      case kNormal:
      case kUnknown:
      case kByte: {
        const auto [it, fresh] = seen.emplace(tokens[id], id);
        TS_CHECK(fresh, f.path(), ": token '", tokens[id], "' appears twice in tokenizer.ggml.tokens (ids ",
                 it->second, " and ", id, ")");
        out.vocab[tokens[id]] = id;
        break;
      }
      case kControl:
      case kUserDefined:
        TS_CHECK(!tokens[id].empty(), f.path(), ": added token ", id, " has empty text");
        out.added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                             {"rstrip", false}, {"normalized", false}, {"special", type == kControl}});
        break;
      case kUnused:
        break;
      default:
        TS_FAIL(f.path(), ": tokenizer.ggml.token_type[", id, "] = ", type, " is not a token type (1..6)");
    }
  }
  return out;
}

// tokenizer.json's "model": byte-level BPE over `vocab` with the file's merges.
json bpe_model_json(const GgufFile& f, json vocab, bool ignore_merges) {
  json merges = json::array();
  if (f.has("tokenizer.ggml.merges"))
    for (std::string& m : f.get_strings("tokenizer.ggml.merges")) merges.push_back(std::move(m));

  json model = {{"type", "BPE"},           {"dropout", nullptr},       {"unk_token", nullptr},
                {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                {"byte_fallback", false},  {"ignore_merges", ignore_merges}};
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return model;
}

// tokenizer.json's "post_processor": TemplateProcessing with the ids the file says to add
// (tok::Tokenizer::added_prefix_ids / added_suffix_ids), or null when it adds none.
json post_processor_json(const GgufFile& f, const GgufTokenizerInfo& info) {
  json single = json::array(), specials = json::object();
  auto special = [&](int32_t id, const std::string& text) {
    single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
    specials[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
  };
  if (info.add_bos) {
    TS_CHECK(info.bos_id >= 0, f.path(), ": tokenizer.ggml.add_bos_token is set but bos_token_id is absent");
    special(info.bos_id, info.bos_token);
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (info.add_eos) {
    TS_CHECK(info.eos_id >= 0, f.path(), ": tokenizer.ggml.add_eos_token is set but eos_token_id is absent");
    special(info.eos_id, info.eos_token);
  }
  if (!info.add_bos && !info.add_eos) return nullptr;
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
}

}  // namespace

GgufTokenizerInfo gguf_tokenizer_info(const GgufFile& f) {
  GgufTokenizerInfo info;
  info.model = f.get_string("tokenizer.ggml.model");
  if (f.has("tokenizer.ggml.pre")) info.pre = f.get_string("tokenizer.ggml.pre");
  if (f.has("tokenizer.chat_template")) info.chat_template = f.get_string("tokenizer.chat_template");
  info.bos_id = token_id_key(f, "tokenizer.ggml.bos_token_id");
  info.eos_id = token_id_key(f, "tokenizer.ggml.eos_token_id");
  info.eot_id = token_id_key(f, "tokenizer.ggml.eot_token_id");
  info.eom_id = token_id_key(f, "tokenizer.ggml.eom_token_id");
  info.pad_id = token_id_key(f, "tokenizer.ggml.padding_token_id");
  if (f.has("tokenizer.ggml.add_bos_token")) info.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.has("tokenizer.ggml.add_eos_token")) info.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  if (info.bos_id >= 0 || info.eos_id >= 0) {
    const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
    auto text = [&](int32_t id, const char* key) {
      TS_CHECK(size_t(id) < tokens.size(), f.path(), ": key '", key, "' = ", id, " is beyond the ", tokens.size(),
               " tokens");
      return tokens[size_t(id)];
    };
    if (info.bos_id >= 0) info.bos_token = text(info.bos_id, "tokenizer.ggml.bos_token_id");
    if (info.eos_id >= 0) info.eos_token = text(info.eos_id, "tokenizer.ggml.eos_token_id");
  }
  return info;
}

json tokenizer_json_from_gguf(const GgufFile& f) {
  const GgufTokenizerInfo info = gguf_tokenizer_info(f);
  TS_CHECK(info.model == "gpt2", f.path(), ": tokenizer.ggml.model '", info.model,
           "' is not supported (only 'gpt2', byte-level BPE)");
  PreTokenizerSpec spec{};
  TS_CHECK(pre_spec(info.pre, spec), f.path(), ": tokenizer.ggml.pre '", info.pre,
           "' is not supported (supported: qwen2, llama-bpe / llama3 / llama-v3)");

  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  TS_CHECK(!tokens.empty() && tokens.size() < (size_t(1) << 30), f.path(), ": key 'tokenizer.ggml.tokens' has ",
           tokens.size(), " tokens");
  SplitVocabulary split = split_vocabulary(f, tokens, token_types(f, tokens.size()));
  json model = bpe_model_json(f, std::move(split.vocab), spec.ignore_merges);

  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  root["added_tokens"] = std::move(split.added);
  root["normalizer"] = spec.nfc ? json{{"type", "NFC"}} : json(nullptr);
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({json{{"type", "Split"}, {"pattern", {{"Regex", spec.regex}}}, {"behavior", "Isolated"},
                         {"invert", false}},
                    byte_level})}};
  root["decoder"] = byte_level;
  root["post_processor"] = post_processor_json(f, info);
  root["model"] = std::move(model);
  return root;
}

json tokenizer_config_json_from_gguf(const GgufFile& f) {
  const GgufTokenizerInfo info = gguf_tokenizer_info(f);
  TS_CHECK(!info.chat_template.empty(), f.path(), ": missing key 'tokenizer.chat_template' (no chat template)");
  json config = {{"chat_template", info.chat_template}, {"add_bos_token", info.add_bos},
                 {"add_eos_token", info.add_eos}};
  if (info.bos_id >= 0) config["bos_token"] = info.bos_token;
  if (info.eos_id >= 0) config["eos_token"] = info.eos_token;
  return config;
}

}  // namespace ts::io
