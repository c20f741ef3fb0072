#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/normalizer.h"

namespace ts::tok {

namespace {

// GPT-2's split pattern, used by ByteLevel when "use_regex" is true.
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

void PreTokenizer::add_steps(const nlohmann::json& config) {
  if (config.is_null()) return;
  TS_CHECK(config.is_object() && config.contains("type"), "tokenizer.json: pre_tokenizer must be an object with a "
           "\"type\", found ", config.dump().substr(0, 200));
  TS_CHECK(!byte_level_, "tokenizer.json: a pre-tokenizer after ByteLevel is not supported (found ",
           config.at("type").get<std::string>(), ")");
  const std::string type = config.at("type").get<std::string>();
  Step step{};
  if (type == "Sequence") {
    for (const auto& sub : config.at("pretokenizers")) add_steps(sub);
    return;
  } else if (type == "Split") {
    step.kind = Step::kSplit;
    const auto& pattern = config.at("pattern");
    if (pattern.contains("Regex")) {
      step.regex = std::make_shared<const Regex>(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      step.literal = pattern.at("String").get<std::string>();
      TS_CHECK(!step.literal.empty(), "tokenizer.json: Split pre-tokenizer with an empty string pattern");
    } else {
      TS_FAIL("tokenizer.json: Split pattern must hold \"Regex\" or \"String\", found ", pattern.dump());
    }
    const std::string behavior = config.value("behavior", "Isolated");
    if (behavior == "Isolated") step.behavior = Behavior::kIsolated;
    else if (behavior == "Removed") step.behavior = Behavior::kRemoved;
    else if (behavior == "MergedWithPrevious") step.behavior = Behavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = Behavior::kMergedWithNext;
    else if (behavior == "Contiguous") step.behavior = Behavior::kContiguous;
    else TS_FAIL("tokenizer.json: Split behavior \"", behavior, "\" is unknown");
    step.invert = config.value("invert", false);
  } else if (type == "ByteLevel") {
    if (config.value("add_prefix_space", false)) {
      Step prefix{};
      prefix.kind = Step::kByteLevelPrefix;
      steps_.push_back(prefix);
    }
    if (config.value("use_regex", true)) {
      step.kind = Step::kSplit;
      step.regex = std::make_shared<const Regex>(kGpt2Pattern);
      steps_.push_back(step);
    }
    byte_level_ = true;
    return;
  } else if (type == "Metaspace") {
    step.kind = Step::kMetaspace;
    step.replacement = config.value("replacement", "\xE2\x96\x81");
    if (config.contains("prepend_scheme")) {
      const std::string scheme = config.at("prepend_scheme").get<std::string>();
      step.prepend = scheme == "always" ? Step::Prepend::kAlways : scheme == "first" ? Step::Prepend::kFirst
                   : scheme == "never" ? Step::Prepend::kNever : Step::Prepend::kAlways;
    } else {  // older files
      step.prepend = config.value("add_prefix_space", true) ? Step::Prepend::kAlways : Step::Prepend::kNever;
    }
    step.metaspace_split = config.value("split", true);
  } else if (type == "Digits") {
    step.kind = Step::kSplit;
    step.regex = std::make_shared<const Regex>(config.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (type == "Whitespace") {  // keep runs of word characters and runs of other non-space characters
    step.kind = Step::kSplit;
    step.regex = std::make_shared<const Regex>("\\w+|[^\\w\\s]+");
    step.behavior = Behavior::kRemoved;
    step.invert = true;
  } else if (type == "WhitespaceSplit") {
    step.kind = Step::kSplit;
    step.regex = std::make_shared<const Regex>("\\s+");
    step.behavior = Behavior::kRemoved;
  } else {
    TS_FAIL("tokenizer.json: pre_tokenizer type \"", type, "\" is not supported (supported: Split, ByteLevel, "
            "Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence)");
  }
  steps_.push_back(std::move(step));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer p;
  p.add_steps(config);
  return p;
}

// Splits each existing span by the step's pattern, then groups matches and gaps by the behaviour (as the Rust
// library does: a match is a separate piece, dropped, glued to a neighbour, or merged with adjacent matches).
void PreTokenizer::apply_split(const Step& step, Pieces& pieces, Pieces& scratch) const {
  scratch.spans.clear();
  std::vector<std::pair<size_t, size_t>> matches;
  struct Part { size_t begin, end; bool is_match; };
  std::vector<Part> parts;
  for (auto [sb, se] : pieces.spans) {
    std::string_view piece(pieces.text.data() + sb, se - sb);
    if (step.regex) {
      step.regex->find_all(piece, matches);
    } else {
      matches.clear();
      for (size_t pos = piece.find(step.literal); pos != std::string_view::npos;
           pos = piece.find(step.literal, pos + step.literal.size()))
        matches.emplace_back(pos, pos + step.literal.size());
    }
    parts.clear();
    size_t cursor = 0;
    for (auto [mb, me] : matches) {
      if (mb > cursor) parts.push_back({cursor, mb, step.invert});
      parts.push_back({mb, me, !step.invert});
      cursor = me;
    }
    if (cursor < piece.size()) parts.push_back({cursor, piece.size(), step.invert});

    size_t first_out = scratch.spans.size();  // merges never cross into the previous input span
    bool glue_next = false;                   // MergedWithNext: the previous match waits for the next part
    bool previous_match = false;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      std::pair<size_t, size_t> span{sb + p.begin, sb + p.end};
      switch (step.behavior) {
        case Behavior::kIsolated: scratch.spans.push_back(span); break;
        case Behavior::kRemoved: if (!p.is_match) scratch.spans.push_back(span); break;
        case Behavior::kMergedWithPrevious:
          if (p.is_match && scratch.spans.size() > first_out && !previous_match) scratch.spans.back().second = span.second;
          else scratch.spans.push_back(span);
          break;
        case Behavior::kMergedWithNext:
          if (glue_next && !p.is_match) scratch.spans.back().second = span.second;
          else scratch.spans.push_back(span);
          glue_next = p.is_match;
          break;
        case Behavior::kContiguous:
          if (i > 0 && p.is_match == previous_match) scratch.spans.back().second = span.second;
          else scratch.spans.push_back(span);
          break;
      }
      previous_match = p.is_match;
    }
  }
  std::swap(pieces.spans, scratch.spans);
}

void PreTokenizer::split(std::string_view text, bool first_section, Pieces& out) const {
  out.text.assign(text);
  out.spans.clear();
  if (!text.empty()) out.spans.emplace_back(0, text.size());
  Pieces scratch;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kSplit: apply_split(step, out, scratch); break;
      case Step::kByteLevelPrefix: {  // each piece not starting with a space gets one
        scratch.text.clear();
        scratch.spans.clear();
        for (auto [b, e] : out.spans) {
          size_t start = scratch.text.size();
          if (out.text[b] != ' ') scratch.text += ' ';
          scratch.text.append(out.text, b, e - b);
          scratch.spans.emplace_back(start, scratch.text.size());
        }
        std::swap(out, scratch);
        break;
      }
      case Step::kMetaspace: {
        scratch.text.clear();
        scratch.spans.clear();
        for (auto [b, e] : out.spans) {
          std::string piece = replace_all(std::string_view(out.text).substr(b, e - b), " ", step.replacement);
          bool prepend = step.prepend == Step::Prepend::kAlways ||
                         (step.prepend == Step::Prepend::kFirst && first_section && b == 0);
          if (prepend && piece.compare(0, step.replacement.size(), step.replacement) != 0)
            piece = step.replacement + piece;
          size_t start = scratch.text.size();
          scratch.text += piece;
          if (!step.metaspace_split) {
            scratch.spans.emplace_back(start, scratch.text.size());
            continue;
          }
          // Split before each replacement character (MergedWithNext).
          size_t piece_start = start;
          for (size_t pos = piece.find(step.replacement, 1); pos != std::string::npos;
               pos = piece.find(step.replacement, pos + step.replacement.size())) {
            scratch.spans.emplace_back(piece_start, start + pos);
            piece_start = start + pos;
          }
          scratch.spans.emplace_back(piece_start, scratch.text.size());
        }
        std::swap(out, scratch);
        break;
      }
    }
  }
}

}  // namespace ts::tok
