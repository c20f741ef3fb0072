// treespark chat-format: render chat messages with the model folder's ChatML template (as its Jinja template
// does), or print the ids the engine would feed the model.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ts::cli {

int cmd_chat_format(int argc, char** argv) {
  CLI::App app{"Render chat messages with a model folder's chat template (tokenizer_config.json)."};
  std::string model_dir, messages_file;
  bool no_thinking = false, no_generation_prompt = false, ids = false;
  app.add_option("--model", model_dir, "model folder (tokenizer_config.json, tokenizer.json)")->required();
  app.add_option("--messages", messages_file, "JSON file: [{\"role\": ..., \"content\": ...}, ...]")->required();
  app.add_flag("--no-thinking", no_thinking, "enable_thinking=false (Qwen3: empty <think> block)");
  app.add_flag("--no-generation-prompt", no_generation_prompt, "do not open an assistant turn at the end");
  app.add_flag("--ids", ids, "print the token ids (turn markers special, contents plain text) instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const auto messages = tok::parse_chat_messages(read_text_file(messages_file));
  const auto chat = tok::ChatTemplate::from_model_dir(model_dir);
  if (ids) {
    const auto tok = tok::Tokenizer::from_file(model_dir + "/tokenizer.json");
    std::string out;
    for (int32_t id : chat.encode_chat(tok, messages, !no_generation_prompt, !no_thinking)) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    std::printf("%s\n", out.c_str());
    return 0;
  }
  const std::string text = chat.render(messages, !no_generation_prompt, !no_thinking);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace ts::cli
