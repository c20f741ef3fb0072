// StreamDecoder: returns decoded text as soon as it is complete UTF-8, holding back only what could still
// change: an incomplete multi-byte sequence at the end, a leading space the decoder may strip, or trailing copies
// of a strip character. Because lossy UTF-8 decoding restarts at every lead byte, decoding the emitted prefix and
// the held-back rest separately gives the same text as decoding the whole.
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ts::tok {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const TokenizerImpl& impl = tok_.impl();
  if (skip_special_ && tok_.is_special(id)) return std::string();
  const std::string& piece = tok_.piece_bytes(id);  // checks the id
  if (!first_piece_) pending_ += impl.decoder.separator();
  first_piece_ = false;
  pending_ += piece;

  const std::string& content = impl.decoder.strip_content();
  if (!started_) {
    // Leading strip: remove copies of `content` while the output is still at its start.
    while (leading_stripped_ < impl.decoder.strip_start() && !content.empty() &&
           pending_.compare(0, content.size(), content) == 0) {
      pending_.erase(0, content.size());
      ++leading_stripped_;
    }
    bool could_still_strip = leading_stripped_ < impl.decoder.strip_start() && pending_.size() < content.size() &&
                             content.compare(0, pending_.size(), pending_) == 0;
    if (pending_.empty() || could_still_strip) return std::string();
    started_ = true;
  }

  // Trailing strip candidates stay pending until flush() (they come off only at the very end).
  size_t held = 0;
  if (impl.decoder.strip_stop() > 0 && !content.empty()) {
    for (size_t k = 0; k < impl.decoder.strip_stop(); ++k) {
      size_t end = pending_.size() - held;
      if (end < content.size() || pending_.compare(end - content.size(), content.size(), content) != 0) break;
      held += content.size();
    }
  }
  std::string_view ready(pending_.data(), pending_.size() - held);
  size_t emit = ready.size() - utf8_incomplete_tail(ready);
  std::string out = utf8_lossy(ready.substr(0, emit));
  pending_.erase(0, emit);
  return out;
}

std::string StreamDecoder::flush() {
  const TokenizerImpl& impl = tok_.impl();
  if (started_) strip_trailing(pending_, impl.decoder.strip_content(), impl.decoder.strip_stop());
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  first_piece_ = true;
  started_ = false;
  leading_stripped_ = 0;
  return out;
}

}  // namespace ts::tok
