// A GGUF file's tokenizer (tokenizer.ggml.* metadata) as the Hugging Face tokenizer.json that src/tokenizer parses
// (tok::Tokenizer::from_json_text(json.dump())), plus the chat template and special ids.
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE) with tokenizer.ggml.pre
//   "qwen2"                           Qwen2 / Qwen2.5 / Qwen3: the Qwen2 split regex (single digits), NFC normalizer
//   "llama-bpe" ("llama3", "llama-v3") Llama-3.x: the Llama-3 split regex (digits in threes), ignore_merges
// Each pre name stands for the pre-tokenizer and normalizer of the tokenizer.json the converter read
// (convert_hf_to_gguf.py hashes its output to choose the name); the regexes are those files' own (llama.cpp
// rewrites them for its engine; these are the originals). Qwen's NFC step is not in llama.cpp, but it is in the
// tokenizer.json the model was trained with, so treespark keeps it. Any other model or pre name (SentencePiece
// "llama", "default", ...) is a ts::Error naming it.
//
// The tokenizer.json built:
//   model        BPE, vocab = tokens of type NORMAL (1), UNKNOWN (2) and BYTE (6) by id, merges "a b" split at the
//                first space after the first byte (as src/tokenizer and llama.cpp split them), byte_fallback off
//   added_tokens CONTROL (3) -> special; USER_DEFINED (4) -> not special; all unnormalized, no strip flags
//   UNUSED (5)   left out (the converter's [PADi] fillers up to the embedding size), so vocab_size() is the
//                tokenizer's own, as tokenizer.json has it
//   pre_tokenizer Sequence[Split(regex, Isolated), ByteLevel(add_prefix_space false, use_regex false)]
//   decoder      ByteLevel;  post_processor TemplateProcessing with bos when tokenizer.ggml.add_bos_token is true
//                (and eos when add_eos_token is), else none
// tokenizer.ggml.token_type absent: every token NORMAL (as llama.cpp reads such files).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf.h"

namespace ts::io {

// Throws ts::Error naming the file and key (missing key, unsupported model or pre name, bad token types).
nlohmann::json tokenizer_json_from_gguf(const GgufFile& gguf);

// The rest of what a GGUF says about its tokenizer; ids are -1 and strings empty when absent.
struct GgufTokenizerInfo {
  std::string model;          // tokenizer.ggml.model ("gpt2")
  std::string pre;            // tokenizer.ggml.pre ("qwen2", "llama-bpe")
  std::string chat_template;  // tokenizer.chat_template
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, pad_id = -1;
  std::string bos_token, eos_token;  // the tokens' texts ("<|im_end|>")
  bool add_bos = false, add_eos = false;  // tokenizer.ggml.add_bos_token / add_eos_token (false when absent)
};
GgufTokenizerInfo gguf_tokenizer_info(const GgufFile& gguf);

// A tokenizer_config.json equivalent for tok::ChatTemplate::from_config_text(): {"chat_template", "bos_token",
// "eos_token", "add_bos_token", "add_eos_token"} (keys whose values are absent are left out). Throws ts::Error
// when the file has no tokenizer.chat_template.
nlohmann::json tokenizer_config_json_from_gguf(const GgufFile& gguf);

}  // namespace ts::io
