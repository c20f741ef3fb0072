// Generated ids -> the text a client may see, as it is generated: incremental detokenisation (complete UTF-8
// only, via tok::StreamDecoder), hidden end-of-turn ids, and stop strings. A suffix that could still become a
// stop string is held back until it either completes the stop string (then it and everything after it are
// dropped) or stops matching (then it is released). The concatenation of every push() and finish() is the
// decoded text cut before the first stop string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ts::server {

class TextStream {
 public:
  // skip_special: special added tokens give no text (as decode(skip_special=true)); hidden_ids never do.
  TextStream(const tok::Tokenizer& tokenizer, std::vector<int32_t> hidden_ids, std::vector<std::string> stop,
             bool skip_special = false);

  // The text that is now safe to send (maybe ""). After a stop string completes, stopped() is true and further
  // pushes return "".
  std::string push(int32_t id);
  // At the end of generation: whatever was held back (a partial stop-string match, an incomplete UTF-8 tail as
  // U+FFFD).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string release();  // cut at a stop string or hold back a possible prefix of one; returns what may go

  tok::StreamDecoder decoder_;
  std::vector<int32_t> hidden_ids_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded text not yet released
  bool stopped_ = false;
};

}  // namespace ts::server
