// Chat formatting for ChatML models (Qwen2/Qwen3 and the project's own model): the rendering that the folder's
// Jinja template produces, without a general Jinja engine. A template is recognised as ChatML when it contains
// "<|im_start|>"; any other template fails clearly at load. Two ChatML variants:
//   - Qwen3 (the template mentions <think>): reasoning in earlier assistant turns is dropped, the last assistant
//     turn after the last user query keeps a <think> block, and enable_thinking=false appends the empty block
//     "<think>\n\n</think>\n\n" after the generation prompt; "tool" turns are wrapped in <tool_response>;
//   - plain ChatML: "<|im_start|>role\ncontent<|im_end|>\n" per message.
// Tool definitions and tool calls are not rendered (no `tools` argument).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ts::tok {

struct ChatMessage {
  std::string role, content;  // role: system | user | assistant | tool
};

// Parses a JSON array of {"role", "content"} objects (or an object holding it under "messages").
std::vector<ChatMessage> parse_chat_messages(const std::string& json_text);

class ChatTemplate {
 public:
  // Reads the template from tokenizer_config.json ("chat_template") or chat_template.jinja, the eos token from
  // tokenizer_config.json and eos ids from generation_config.json when present.
  static ChatTemplate from_model_dir(const std::string& dir);
  // `tokenizer_config_json`: the text of a tokenizer_config.json (for tests and tools).
  static ChatTemplate from_config_text(const std::string& tokenizer_config_json, const std::string& origin);

  std::string render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt, bool enable_thinking) const;
  // Encodes a rendered conversation so that turn markers are special tokens but message CONTENT is plain text
  // (a user cannot forge <|im_start|>). Equals tok.encode(render(...)) when no content holds special-token text.
  std::vector<int32_t> encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                                   bool add_generation_prompt, bool enable_thinking) const;
  // Ids that end a reply: the eos token, the turn end marker, and generation_config.json's eos ids.
  std::vector<int32_t> stop_ids(const Tokenizer& tok) const;

  bool thinking_template() const { return thinking_; }

 private:
  struct Piece {
    std::string text;
    bool marker;  // a turn marker (<|im_start|>, <|im_end|>): encoded as its special token
  };
  std::vector<Piece> render_pieces(const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                   bool enable_thinking) const;

  std::string origin_;
  bool thinking_ = false;                 // Qwen3-style template
  std::string eos_token_;                 // from tokenizer_config.json ("" if none)
  std::vector<int32_t> generation_eos_;   // from generation_config.json
};

}  // namespace ts::tok
