#include "prompt_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ts::cli {

PromptSet load_prompt_set(const std::string& path, const ModelBundle& bundle, bool enable_thinking) {
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot open prompt file ", path);
  PromptSet set;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TS_FAIL(path, ":", line_no, ": invalid JSON: ", e.what());
    }
    TS_CHECK(j.is_object(), path, ":", line_no, ": expected a JSON object");
    std::vector<int32_t> ids;
    if (j.contains("ids")) {
      for (const auto& v : j["ids"]) {
        TS_CHECK(v.is_number_integer(), path, ":", line_no, ": 'ids' must hold integers");
        ids.push_back(v.get<int32_t>());
      }
    } else if (j.contains("messages")) {
      TS_CHECK(bundle.tokenizer && bundle.chat_template, path, ":", line_no,
               ": chat prompts need tokenizer.json and tokenizer_config.json in the model folder");
      std::vector<tok::ChatMessage> msgs;
      for (const auto& m : j["messages"]) {
        TS_CHECK(m.is_object() && m.contains("role") && m.contains("content") && m["role"].is_string() &&
                     m["content"].is_string(),
                 path, ":", line_no, ": each message needs string 'role' and 'content'");
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      ids = bundle.chat_template->encode_chat(*bundle.tokenizer, msgs, true, enable_thinking);
    } else if (j.contains("prompt")) {
      TS_CHECK(j["prompt"].is_string(), path, ":", line_no, ": 'prompt' must be a string");
      TS_CHECK(bundle.tokenizer, path, ":", line_no, ": text prompts need tokenizer.json in the model folder");
      ids = bundle.tokenizer->encode(j["prompt"].get<std::string>());
    } else {
      TS_FAIL(path, ":", line_no, ": expected one of 'ids', 'prompt', 'messages'");
    }
    TS_CHECK(!ids.empty(), path, ":", line_no, ": empty prompt");
    set.names.push_back(j.contains("id") ? j["id"].dump() : std::to_string(line_no));
    set.prompt_ids.push_back(std::move(ids));
  }
  TS_CHECK(!set.prompt_ids.empty(), path, ": no prompts");
  return set;
}

}  // namespace ts::cli
