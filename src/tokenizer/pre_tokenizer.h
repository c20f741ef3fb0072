// The tokenizer.json "pre_tokenizer": splits normalized text into pieces ("words") that the model encodes
// independently. Supported: Split (regex or string; behaviours Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (optional GPT-2 regex and prefix space), Metaspace, Digits,
// Whitespace, WhitespaceSplit, Sequence.
//
// ByteLevel does not rewrite the text into its printable alphabet here: it only marks the output as byte-level so
// that the model maps each byte straight to its id (the same result, without building the mapped strings).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace ts::tok {

// Pieces of text: `spans` are [begin, end) byte ranges into `text`, in order.
struct Pieces {
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;
};

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& config);  // config may be null: one piece per input
  // Splits `text` into `out` (overwritten). `first_section` is true for the first piece of the user's input
  // (Metaspace's prepend_scheme "first").
  void split(std::string_view text, bool first_section, Pieces& out) const;
  bool byte_level() const { return byte_level_; }

 private:
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    enum Kind { kSplit, kByteLevelPrefix, kMetaspace } kind;
    std::shared_ptr<const Regex> regex;  // kSplit with a regex
    std::string literal;                 // kSplit with a literal string
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    std::string replacement;             // kMetaspace: the character standing for a space (U+2581)
    enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
    bool metaspace_split = true;
  };
  void add_steps(const nlohmann::json& config);
  void apply_split(const Step& step, Pieces& pieces, Pieces& scratch) const;
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace ts::tok
