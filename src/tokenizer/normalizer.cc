#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ts::tok {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

void Normalizer::add_steps(const nlohmann::json& config, std::vector<Step>& steps) {
  if (config.is_null()) return;
  TS_CHECK(config.is_object() && config.contains("type"), "tokenizer.json: normalizer must be an object with a "
           "\"type\", found ", config.dump().substr(0, 200));
  const std::string type = config.at("type").get<std::string>();
  Step step{};
  if (type == "Sequence") {
    for (const auto& sub : config.at("normalizers")) add_steps(sub, steps);
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = Step::kNormalForm;
    step.form = type == "NFC" ? NormalForm::NFC : type == "NFD" ? NormalForm::NFD
              : type == "NFKC" ? NormalForm::NFKC : NormalForm::NFKD;
  } else if (type == "Lowercase") {
    step.kind = Step::kLowercase;
  } else if (type == "Prepend") {
    step.kind = Step::kPrepend;
    step.text = config.at("prepend").get<std::string>();
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    step.text = config.at("content").get<std::string>();
    const auto& pattern = config.at("pattern");
    if (pattern.contains("String")) {
      step.literal = pattern.at("String").get<std::string>();
      TS_CHECK(!step.literal.empty(), "tokenizer.json: Replace normalizer with an empty pattern");
    } else if (pattern.contains("Regex")) {
      step.regex = std::make_shared<const Regex>(pattern.at("Regex").get<std::string>());
    } else {
      TS_FAIL("tokenizer.json: Replace normalizer pattern must hold \"String\" or \"Regex\", found ", pattern.dump());
    }
  } else if (type == "Strip") {
    step.kind = Step::kStrip;
    step.strip_left = config.value("strip_left", true);
    step.strip_right = config.value("strip_right", true);
  } else {
    TS_FAIL("tokenizer.json: normalizer type \"", type, "\" is not supported (supported: NFC, NFD, NFKC, NFKD, "
            "Lowercase, Prepend, Replace, Strip, Sequence)");
  }
  steps.push_back(std::move(step));
}

Normalizer Normalizer::from_json(const nlohmann::json& config) {
  Normalizer n;
  add_steps(config, n.steps_);
  return n;
}

std::string Normalizer::apply(std::string_view input) const {
  std::string text(input);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kNormalForm: text = normalize(text, step.form); break;
      case Step::kLowercase: text = to_lower(text); break;
      case Step::kPrepend:
        if (!text.empty()) text = step.text + text;  // the reference prepends only to non-empty text
        break;
      case Step::kReplace:
        if (step.regex) {
          std::vector<std::pair<size_t, size_t>> matches;
          step.regex->find_all(text, matches);
          std::string out;
          size_t pos = 0;
          for (auto [b, e] : matches) {
            out.append(text, pos, b - pos);
            out += step.text;
            pos = e;
          }
          out.append(text, pos, std::string::npos);
          text = std::move(out);
        } else {
          text = replace_all(text, step.literal, step.text);
        }
        break;
      case Step::kStrip: {
        size_t begin = 0, end = text.size();
        if (step.strip_left) {
          while (begin < end) {
            size_t p = begin;
            if (!is_unicode_space(utf8_next(text, p))) break;
            begin = p;
          }
        }
        if (step.strip_right) {
          while (end > begin) {
            size_t p = end - 1;
            while (p > begin && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
            size_t q = p;
            if (!is_unicode_space(utf8_next(text, q))) break;
            end = p;
          }
        }
        text = text.substr(begin, end - begin);
        break;
      }
    }
  }
  return text;
}

}  // namespace ts::tok
