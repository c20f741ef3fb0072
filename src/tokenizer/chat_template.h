// Chat formatting with the model folder's own Jinja chat template (tokenizer_config.json "chat_template" or
// chat_template.jinja), rendered by the interpreter in jinja.h as @huggingface/jinja renders it: Qwen3
// (thinking on and off), Qwen2.5, Llama-3.x, Mistral and any other template within the supported subset.
//
// The template sees: messages (role, content, and any other keys a message carries, such as tool_calls),
// add_generation_prompt, enable_thinking, bos_token, eos_token, and tools = none (tool definitions are not
// passed).
//
// Message contents cannot forge special tokens: the renderer remembers which output bytes came from the
// messages, and encode_chat() lets special tokens (<|im_start|>, <|eot_id|>, [INST] where it is one) match only
// in the template's own bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace ts::tok {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role, content;
  // Other keys of the message as the template reads them (tool_calls, name, reasoning_content; "content": null
  // overrides `content`). Keys keep their order (tojson prints them in that order).
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// Parses a JSON array of messages (or an object holding it under "messages"). Each needs a string "role";
// "content" is a string, null or absent; other keys are kept in `extra`.
std::vector<ChatMessage> parse_chat_messages(const std::string& json_text);

class ChatTemplate {
 public:
  // True when the folder has a chat template (tokenizer_config.json "chat_template" or chat_template.jinja).
  static bool model_dir_has_template(const std::string& dir);
  // Reads the template, bos/eos tokens from tokenizer_config.json and eos ids from generation_config.json.
  // Throws ts::Error when there is no template or it does not parse.
  static ChatTemplate from_model_dir(const std::string& dir);
  // `tokenizer_config_json`: the text of a tokenizer_config.json (for tests and tools).
  static ChatTemplate from_config_text(const std::string& tokenizer_config_json, const std::string& origin);

  std::string render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt, bool enable_thinking) const;
  // The ids of the rendering, with special tokens matched only in the template's own text (a user cannot forge
  // <|im_start|>). Equals tok.encode(render(...)) when no content holds special-token text.
  std::vector<int32_t> encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                                   bool add_generation_prompt, bool enable_thinking) const;
  // Ids that end a reply: the eos token, the turn-end markers the template writes (<|im_end|>, <|eot_id|>,
  // <|eom_id|>, <|end|>, <end_of_turn>) and generation_config.json's eos ids.
  std::vector<int32_t> stop_ids(const Tokenizer& tok) const;

  bool thinking_template() const { return thinking_; }  // the template mentions <think> (Qwen3 style)
  const std::string& source() const { return source_; }

 private:
  struct Rendered {
    std::string bytes, from_input;  // from_input: "" or [bytes.size()] 1 where the bytes came from the messages
  };
  Rendered render_marked(const std::vector<ChatMessage>& msgs, bool add_generation_prompt, bool enable_thinking) const;

  std::shared_ptr<const jinja::Template> template_;
  std::string source_, origin_;
  bool thinking_ = false;
  std::string bos_token_, eos_token_;    // from tokenizer_config.json ("" if none)
  std::vector<int32_t> generation_eos_;  // from generation_config.json
};

}  // namespace ts::tok
