// The tokenizer.json "normalizer": a sequence of text -> text steps applied to each piece of input between added
// tokens, before pre-tokenization. Supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace (string or regex),
// Strip, Sequence. Others fail at load with the type's name.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ts::tok {

class Normalizer {
 public:
  // `config` is the "normalizer" value (may be null: the identity).
  static Normalizer from_json(const nlohmann::json& config);
  std::string apply(std::string_view text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum Kind { kNormalForm, kLowercase, kPrepend, kReplace, kStrip } kind;
    NormalForm form = NormalForm::NFC;   // kNormalForm
    std::string text;                    // kPrepend: prefix; kReplace: replacement
    std::string literal;                 // kReplace with a String pattern
    std::shared_ptr<const Regex> regex;  // kReplace with a Regex pattern
    bool strip_left = false, strip_right = false;  // kStrip
  };
  static void add_steps(const nlohmann::json& config, std::vector<Step>& steps);
  std::vector<Step> steps_;
};

// Replaces every occurrence of `from` (non-empty) in `text` by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace ts::tok
