// treespark: one binary, many subcommands. Errors from any layer arrive here as ts::Error and become a message
// on stderr and exit code 1; nothing aborts.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"generate", ts::cli::cmd_generate, "generate tokens (plain, chain or tree speculative decoding)"},
    {"perplexity", ts::cli::cmd_perplexity, "mean NLL and perplexity of an id sequence"},
    {"make-model", ts::cli::cmd_make_model, "write a random-weight Qwen3/Qwen2/Llama checkpoint folder"},
    {"tokenize", ts::cli::cmd_tokenize, "text -> token ids with a tokenizer.json"},
    {"detokenize", ts::cli::cmd_detokenize, "token ids -> text"},
    {"chat-format", ts::cli::cmd_chat_format, "render chat messages with the model's template"},
    {"calibrate", ts::cli::cmd_calibrate, "fit the draft-edge acceptance calibration"},
    {"serve", ts::cli::cmd_serve, "OpenAI-compatible HTTP server (completions, chat, metrics)"},
    {"bench", ts::cli::cmd_bench, "benchmarks: forward | tokenize | spec | engine | serve"},
};

void usage() {
  std::fprintf(stderr, "usage: treespark <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-12s %s\n", c.name, c.help);
  std::fprintf(stderr, "\n`treespark <command> --help` lists a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      try {
        return c.run(argc - 1, argv + 1);
      } catch (const ts::Error& e) {
        std::fprintf(stderr, "treespark %s: error: %s\n", c.name, e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "treespark %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "treespark: unknown command '%s'\n\n", argv[1]);
  usage();
  return 2;
}
