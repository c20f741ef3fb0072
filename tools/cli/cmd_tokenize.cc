// treespark tokenize: text -> ids with a Hugging Face tokenizer.json (exactly as the reference tokenizers do).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace ts::cli {

namespace {
// Accepts a tokenizer.json or a model folder holding one.
std::string tokenizer_json_path(const std::string& path) {
  return file_exists(path + "/tokenizer.json") ? path + "/tokenizer.json" : path;
}
}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text with a Hugging Face tokenizer.json; prints the ids."};
  std::string tokenizer, text, file;
  bool json = false, no_special = false, add_special = false;
  app.add_option("--tokenizer", tokenizer, "tokenizer.json (or a model folder holding one)")->required();
  auto* text_opt = app.add_option("--text", text, "text to tokenize");
  auto* file_opt = app.add_option("--file", file, "file whose contents to tokenize");
  text_opt->excludes(file_opt);
  app.add_flag("--json", json, "print a JSON array");
  app.add_flag("--no-special", no_special, "treat special-token text such as <|im_start|> as plain text");
  app.add_flag("--add-special", add_special, "add the post-processor's tokens (e.g. Llama's <s>)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  TS_CHECK(text_opt->count() + file_opt->count() == 1, "give the text with --text STR or --file F");
  if (file_opt->count()) text = read_text_file(file);

  const auto tok = tok::Tokenizer::from_file(tokenizer_json_path(tokenizer));
  std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/!no_special);
  if (add_special) {
    ids.insert(ids.begin(), tok.added_prefix_ids().begin(), tok.added_prefix_ids().end());
    ids.insert(ids.end(), tok.added_suffix_ids().begin(), tok.added_suffix_ids().end());
  }
  std::string out = json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += json ? ", " : " ";
    out += std::to_string(ids[i]);
  }
  if (json) out += "]";
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace ts::cli
