// Hugging Face tokenizer.json tokenization, exact to the reference libraries for the two BPE families that
// matter for LLMs:
//   - byte-level BPE (GPT-2, Qwen2/Qwen3, Llama-3): NFC normalizer, Split pre-tokenizer with the file's regex,
//     ByteLevel, BPE merges;
//   - SentencePiece-style BPE (Llama-2, Mistral): Prepend/Replace normalizer or Metaspace, byte fallback <0xNN>.
//
// encode() equals the reference's encode(text, add_special_tokens=false): the post-processor's extra tokens (a
// BOS) are not added; added_prefix_ids()/added_suffix_ids() say what it would add. Text containing added-token
// strings (<|im_start|>) yields those tokens by default, exactly as the reference does; parse_special=false
// treats the special ones as plain text (the chat path uses that for message contents). Invalid UTF-8 input is a
// ts::Error naming the byte offset, never a crash. decode() replaces invalid UTF-8 (e.g. a lone byte-fallback
// byte) by U+FFFD.
//
// A Tokenizer is cheap to copy (shared, immutable state) and safe to use from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ts::tok {

struct TokenizerImpl;

class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& tokenizer_json_path);  // throws ts::Error with a clear message
  static Tokenizer from_json_text(const std::string& tokenizer_json, const std::string& origin = "tokenizer.json");
  // An already parsed tokenizer.json (e.g. io::tokenizer_json_from_gguf()); `origin` names it in errors.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const std::string& origin);

  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // encode() where special tokens may match only inside the stretches marked in `from_input` ([text.size()]
  // bytes, 0 = the chat template's own markup, 1 = caller data such as message contents; "" = all markup).
  // Equals encode(text) when the caller data holds no special-token text.
  std::vector<int32_t> encode_marked(std::string_view text, std::string_view from_input) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  int32_t token_id(std::string_view token_text) const;  // -1 if unknown
  std::string token_text(int32_t id) const;              // the vocabulary string ("Ġthe"); throws if out of range
  int vocab_size() const;                                // including added tokens

  bool is_special(int32_t id) const;  // an added token marked special (skipped by decode(skip_special=true))
  // Ids the file's post-processor (TemplateProcessing) puts around a single sequence, e.g. Llama-2's <s>.
  const std::vector<int32_t>& added_prefix_ids() const;
  const std::vector<int32_t>& added_suffix_ids() const;

  // The bytes one id contributes to decoded output (before the output-level strip rules); may be partial UTF-8.
  const std::string& piece_bytes(int32_t id) const;

 private:
  friend class StreamDecoder;
  std::vector<int32_t> encode_impl(std::string_view text, bool parse_special, std::string_view special_ok) const;
  const TokenizerImpl& impl() const;  // throws if this Tokenizer was default-constructed (never loaded)
  std::shared_ptr<const TokenizerImpl> impl_;
};

// Feeds ids one at a time and returns only complete UTF-8 text, so a server can stream it. The concatenation of
// every push() and the final flush() equals decode() of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();  // whatever is left (invalid trailing bytes as U+FFFD); the decoder can then be reused

 private:
  Tokenizer tok_;
  bool skip_special_;
  std::string pending_;       // bytes not yet returned: an incomplete UTF-8 tail, or held-back strip candidates
  bool first_piece_ = true;   // no piece pushed yet (the separator goes between pieces)
  bool started_ = false;      // the output's start is settled (leading strip done)
  size_t leading_stripped_ = 0;
};

}  // namespace ts::tok
