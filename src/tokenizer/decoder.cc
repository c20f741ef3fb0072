#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"

namespace ts::tok {

void strip_leading(std::string& text, const std::string& content, size_t count) {
  if (content.empty()) return;
  size_t cut = 0;
  for (size_t i = 0; i < count && text.compare(cut, content.size(), content) == 0; ++i) cut += content.size();
  text.erase(0, cut);
}

void strip_trailing(std::string& text, const std::string& content, size_t count) {
  if (content.empty()) return;
  for (size_t i = 0; i < count && text.size() >= content.size() &&
                     text.compare(text.size() - content.size(), content.size(), content) == 0;
       ++i)
    text.resize(text.size() - content.size());
}

void Decoder::add_steps(const nlohmann::json& config, bool& fused) {
  const std::string type = config.at("type").get<std::string>();
  Step step{};
  if (type == "Sequence") {
    for (const auto& sub : config.at("decoders")) add_steps(sub, fused);
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::kByteLevel;
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    const auto& pattern = config.at("pattern");
    TS_CHECK(pattern.contains("String"), "tokenizer.json: Replace decoder supports only a String pattern, found ",
             pattern.dump());
    step.from = pattern.at("String").get<std::string>();
    step.to = config.at("content").get<std::string>();
    TS_CHECK(!step.from.empty(), "tokenizer.json: Replace decoder with an empty pattern");
  } else if (type == "ByteFallback") {
    step.kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    fused = true;  // later steps see the whole output as one token
    return;
  } else if (type == "Strip") {
    std::string content = config.value("content", " ");
    size_t start = config.value("start", 0), stop = config.value("stop", 0);
    if (fused) {
      TS_CHECK(strip_start_ == 0 && strip_stop_ == 0, "tokenizer.json: more than one output-level Strip decoder");
      strip_content_ = content;
      strip_start_ = start;
      strip_stop_ = stop;
      return;
    }
    step.kind = Step::kStripEach;
    step.content = content;
    step.start = start;
    step.stop = stop;
  } else if (type == "Metaspace") {
    std::string replacement = config.value("replacement", "\xE2\x96\x81");
    step.kind = Step::kReplace;
    step.from = replacement;
    step.to = " ";
    bool prepends = config.contains("prepend_scheme") ? config.at("prepend_scheme").get<std::string>() != "never"
                                                      : config.value("add_prefix_space", true);
    if (prepends) {  // the space the pre-tokenizer prepended comes off the first token
      strip_content_ = " ";
      strip_start_ = 1;
    }
  } else {
    TS_FAIL("tokenizer.json: decoder type \"", type, "\" is not supported (supported: ByteLevel, Replace, "
            "ByteFallback, Fuse, Strip, Metaspace, Sequence)");
  }
  steps_.push_back(std::move(step));
}

Decoder Decoder::from_json(const nlohmann::json& config) {
  Decoder d;
  if (config.is_null()) {
    d.separator_ = " ";
    return d;
  }
  bool fused = false;
  d.add_steps(config, fused);
  return d;
}

std::string Decoder::piece(std::string_view token_text, bool is_added) const {
  std::string text(token_text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kByteLevel: {
        if (is_added) break;
        // Map each alphabet character back to its byte; a token with any other character stays as it is.
        const auto& alphabet = ByteLevelAlphabet::get();
        std::string bytes;
        bool all_mapped = true;
        for (size_t pos = 0; pos < text.size() && all_mapped;) {
          char32_t c = utf8_next(text, pos);
          int b = c < 324 ? alphabet.char_to_byte[c] : -1;
          if (b < 0) all_mapped = false;
          else bytes += char(b);
        }
        if (all_mapped) text = std::move(bytes);
        break;
      }
      case Step::kReplace: text = replace_all(text, step.from, step.to); break;
      case Step::kByteFallback: {
        auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
        if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' && hex(text[3]) && hex(text[4]))
          text = std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
        break;
      }
      case Step::kStripEach:
        strip_leading(text, step.content, step.start);
        strip_trailing(text, step.content, step.stop);
        break;
    }
  }
  return text;
}

}  // namespace ts::tok
