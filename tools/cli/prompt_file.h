// Prompt sets in JSONL: one object per line with "ids" (token ids), "prompt" (text) or "messages" (a chat).
#pragma once

#include <string>
#include <vector>

#include "engine/model_bundle.h"

namespace ts::cli {

struct PromptSet {
  std::vector<std::string> names;                 // [n] the "id" field, or the line number
  std::vector<std::vector<int32_t>> prompt_ids;   // [n] token ids
};

// Reads and tokenizes every line; bad lines are errors naming the file and line.
PromptSet load_prompt_set(const std::string& path, const ModelBundle& bundle, bool enable_thinking = false);

}  // namespace ts::cli
