#include "server/text_stream.h"

#include <algorithm>

namespace ts::server {

TextStream::TextStream(const tok::Tokenizer& tokenizer, std::vector<int32_t> hidden_ids, std::vector<std::string> stop,
                       bool skip_special)
    : decoder_(tokenizer, skip_special), hidden_ids_(std::move(hidden_ids)), stop_(std::move(stop)) {}

std::string TextStream::release() {
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    stopped_ = true;
    return out;
  }
  // The longest suffix of pending_ that is a proper prefix of a stop string stays back.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::push(int32_t id) {
  if (stopped_) return "";
  if (std::find(hidden_ids_.begin(), hidden_ids_.end(), id) != hidden_ids_.end()) return "";
  pending_ += decoder_.push(id);
  return release();
}

std::string TextStream::finish() {
  if (stopped_) return "";
  pending_ += decoder_.flush();
  std::string out = release();
  if (!stopped_) {  // the generation ended: a partial match is plain text after all
    out += pending_;
    pending_.clear();
  }
  return out;
}

}  // namespace ts::server
