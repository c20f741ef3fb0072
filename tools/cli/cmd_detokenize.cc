// treespark detokenize: ids -> text with a Hugging Face tokenizer.json.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace ts::cli {

int cmd_detokenize(int argc, char** argv) {
  CLI::App app{"Decode token ids with a Hugging Face tokenizer.json; prints the text."};
  std::string tokenizer, ids_text;
  bool skip_special = false;
  app.add_option("--tokenizer", tokenizer, "tokenizer.json (or a model folder holding one)")->required();
  app.add_option("--ids", ids_text, "ids separated by commas or spaces (a JSON array also works)")->required();
  app.add_flag("--skip-special", skip_special, "leave out special tokens");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<int32_t> ids;
  std::string number;
  auto flush_number = [&] {
    if (number.empty()) return;
    TS_CHECK(number.size() <= 10, "--ids: '", number, "' is not a token id");
    ids.push_back(int32_t(std::stoll(number)));
    number.clear();
  };
  for (char c : ids_text) {
    if (c >= '0' && c <= '9') {
      number += c;
    } else {
      TS_CHECK(c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']', "--ids: unexpected '", c,
               "' in \"", ids_text, "\" (expected ids like 1,2,3)");
      flush_number();
    }
  }
  flush_number();
  const std::string path = file_exists(tokenizer + "/tokenizer.json") ? tokenizer + "/tokenizer.json" : tokenizer;
  const auto tok = tok::Tokenizer::from_file(path);
  std::string text = tok.decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

}  // namespace ts::cli
