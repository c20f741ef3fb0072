#include "tokenizer/tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ts::tok {

namespace {

// TemplateProcessing "single": the special tokens before and after the sequence "$A".
void read_post_processor(const nlohmann::json& config, TokenizerImpl& impl) {
  if (config.is_null() || config.value("type", "") != "TemplateProcessing") return;
  const auto& special_tokens = config.value("special_tokens", nlohmann::json::object());
  bool after = false;
  for (const auto& item : config.at("single")) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    TS_CHECK(special_tokens.contains(name), impl.origin, ": post_processor uses special token \"", name,
             "\" without listing its ids");
    for (const auto& id : special_tokens.at(name).at("ids"))
      (after ? impl.suffix_ids : impl.prefix_ids).push_back(id.get<int32_t>());
  }
}

void check_id(const TokenizerImpl& impl, int32_t id) {
  TS_CHECK(id >= 0 && id < impl.vocab_size, "token id ", id, " is out of range (vocabulary of ", impl.vocab_size,
           " ids in ", impl.origin, ")");
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  TS_CHECK(file_exists(tokenizer_json_path), "tokenizer file not found: ", tokenizer_json_path,
           " (expected a Hugging Face tokenizer.json)");
  return from_json_text(read_text_file(tokenizer_json_path), tokenizer_json_path);
}

Tokenizer Tokenizer::from_json_text(const std::string& text, const std::string& origin) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL(origin, ": not valid JSON (", e.what(), ")");
  }
  return from_json(root, origin);
}

Tokenizer Tokenizer::from_json(const nlohmann::json& root, const std::string& origin) {
  TS_CHECK(root.is_object() && root.contains("model"), origin, ": not a Hugging Face tokenizer.json (no \"model\")");
  auto impl = std::make_shared<TokenizerImpl>();
  impl->origin = origin;
  try {
    auto get = [&](const char* key) { return root.contains(key) ? root.at(key) : nlohmann::json(); };
    impl->added = AddedVocabulary::from_json(get("added_tokens"));
    impl->normalizer = Normalizer::from_json(get("normalizer"));
    impl->pre_tokenizer = PreTokenizer::from_json(get("pre_tokenizer"));
    impl->model = BpeModel::from_json(root.at("model"), impl->pre_tokenizer.byte_level());
    impl->decoder = Decoder::from_json(get("decoder"));
    read_post_processor(get("post_processor"), *impl);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL(origin, ": unexpected tokenizer.json structure (", e.what(), ")");
  }

  int32_t size = int32_t(impl->model->id_to_token().size());
  for (const auto& t : impl->added.tokens()) size = std::max(size, t.id + 1);
  impl->vocab_size = size;
  impl->token_text = impl->model->id_to_token();
  impl->token_text.resize(size);
  impl->special.assign(size, 0);
  for (const auto& t : impl->added.tokens()) {
    impl->token_text[t.id] = t.content;
    impl->special[t.id] = t.special;
  }
  impl->pieces.resize(size);
  for (int32_t id = 0; id < size; ++id)
    impl->pieces[id] = impl->decoder.piece(impl->token_text[id], impl->added.by_id(id) != nullptr);
  for (int32_t id : impl->prefix_ids) check_id(*impl, id);
  for (int32_t id : impl->suffix_ids) check_id(*impl, id);

  Tokenizer tok;
  tok.impl_ = std::move(impl);
  return tok;
}

const TokenizerImpl& Tokenizer::impl() const {
  TS_CHECK(impl_ != nullptr, "tokenizer used before it was loaded (use Tokenizer::from_file)");
  return *impl_;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  return encode_impl(text, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode_marked(std::string_view text, std::string_view from_input) const {
  TS_CHECK(from_input.empty() || from_input.size() == text.size(), "encode_marked: the provenance mask has ",
           from_input.size(), " bytes for a text of ", text.size());
  if (from_input.empty()) return encode_impl(text, true, {});
  std::string special_ok(from_input.size(), 1);
  for (size_t i = 0; i < from_input.size(); ++i) special_ok[i] = from_input[i] == 0;
  return encode_impl(text, true, special_ok);
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool parse_special,
                                            std::string_view special_ok) const {
  const TokenizerImpl& impl = this->impl();
  check_utf8(text, "text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> raw_segments, normalized_segments;
  impl.added.split(text, parse_special, /*normalized=*/false, raw_segments, special_ok);
  Pieces pieces;
  for (size_t i = 0; i < raw_segments.size(); ++i) {
    const Segment& raw = raw_segments[i];
    if (raw.token_id >= 0) {
      ids.push_back(raw.token_id);
      continue;
    }
    std::string normalized = impl.normalizer.empty() ? std::string(raw.text) : impl.normalizer.apply(raw.text);
    normalized_segments.clear();
    if (impl.added.has_normalized()) {
      // Normalization moves bytes, so a marked stretch allows special tokens only if it is all markup.
      bool segment_ok = parse_special;
      if (!special_ok.empty()) {
        const size_t offset = size_t(raw.text.data() - text.data());
        for (size_t k = offset; k < offset + raw.text.size(); ++k) segment_ok = segment_ok && special_ok[k] != 0;
      }
      impl.added.split(normalized, segment_ok, /*normalized=*/true, normalized_segments);
    } else if (!normalized.empty()) {
      normalized_segments.push_back({normalized, -1});
    }
    for (const Segment& segment : normalized_segments) {
      if (segment.token_id >= 0) {
        ids.push_back(segment.token_id);
        continue;
      }
      impl.pre_tokenizer.split(segment.text, /*first_section=*/i == 0, pieces);
      for (auto [begin, end] : pieces.spans)
        impl.model->encode_piece(std::string_view(pieces.text).substr(begin, end - begin), ids);
    }
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const TokenizerImpl& impl = this->impl();
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    check_id(impl, id);
    if (skip_special && impl.special[id]) continue;
    if (!first) bytes += impl.decoder.separator();
    bytes += impl.pieces[id];
    first = false;
  }
  strip_leading(bytes, impl.decoder.strip_content(), impl.decoder.strip_start());
  strip_trailing(bytes, impl.decoder.strip_content(), impl.decoder.strip_stop());
  return utf8_lossy(bytes);
}

int32_t Tokenizer::token_id(std::string_view token_text) const {
  if (const AddedToken* t = impl().added.by_content(token_text)) return t->id;
  return impl().model->find(token_text);
}

std::string Tokenizer::token_text(int32_t id) const {
  check_id(impl(), id);
  return impl().token_text[id];
}

int Tokenizer::vocab_size() const { return impl().vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
  check_id(impl(), id);
  return impl().special[id] != 0;
}

const std::vector<int32_t>& Tokenizer::added_prefix_ids() const { return impl().prefix_ids; }
const std::vector<int32_t>& Tokenizer::added_suffix_ids() const { return impl().suffix_ids; }

const std::string& Tokenizer::piece_bytes(int32_t id) const {
  check_id(impl(), id);
  return impl().pieces[id];
}

}  // namespace ts::tok
