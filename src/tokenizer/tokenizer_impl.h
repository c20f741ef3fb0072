// The state behind ts::tok::Tokenizer (internal to the tokenizer layer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace ts::tok {

struct TokenizerImpl {
  std::string origin;  // file path, for messages
  AddedVocabulary added;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  Decoder decoder;
  int32_t vocab_size = 0;              // max id + 1 over the model's vocabulary and the added tokens
  std::vector<std::string> token_text; // [vocab_size] vocabulary string per id ("" for unused ids)
  std::vector<std::string> pieces;     // [vocab_size] decoded bytes per id
  std::vector<uint8_t> special;        // [vocab_size] 1 for special added tokens
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor tokens around a single sequence
};

}  // namespace ts::tok
