#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace ts::tok {

void BpeModel::PairTable::init(size_t n) {
  size_t capacity = 16;
  while (capacity < n * 2) capacity <<= 1;  // load factor <= 0.5
  slots.assign(capacity, Slot{kEmpty, 0, 0});
  mask = capacity - 1;
}

namespace {
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}
inline uint64_t pair_hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 17; }

const char kMetaspace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's word-start mark

// model.vocab ({token: id}) into token_to_id; returns id -> token ([max id + 1], "" for ids no token has).
std::vector<std::string> read_vocab(const nlohmann::json& vocab, TokenMap& token_to_id) {
  token_to_id.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    int64_t id = id_json.get<int64_t>();
    TS_CHECK(id >= 0 && id < (int64_t(1) << 30), "tokenizer.json: vocab id ", id, " of \"", token, "\" is out of range");
    token_to_id.emplace(token, int32_t(id));
    max_id = std::max(max_id, int32_t(id));
  }
  std::vector<std::string> id_to_token(size_t(max_id + 1), std::string());
  for (const auto& [token, id] : token_to_id) id_to_token[id] = token;
  return id_to_token;
}

// True when no token has "▁" right after another character (see BpeModel::word_start_marker_).
bool metaspace_only_starts_runs(const TokenMap& token_to_id) {
  const std::string metaspace = kMetaspace;
  bool safe = true;
  for (const auto& [token, id] : token_to_id) {
    for (size_t p = token.find(metaspace, 1); safe && p != std::string::npos; p = token.find(metaspace, p + 3))
      safe = p >= 3 && token.compare(p - 3, 3, metaspace) == 0;
    if (!safe) break;
  }
  return safe;
}

// One entry of model.merges: a "a b" string (older files) or an ["a", "b"] pair.
std::pair<std::string, std::string> merge_tokens(const nlohmann::json& entry) {
  std::string left, right;
  if (entry.is_string()) {
    const std::string s = entry.get<std::string>();
    size_t space = s.find(' ', 1);  // a merge of a space token would start with one; they are written as Ġ
    TS_CHECK(space != std::string::npos, "tokenizer.json: merge \"", s, "\" is not two tokens separated by a space");
    left = s.substr(0, space);
    right = s.substr(space + 1);
  } else {
    TS_CHECK(entry.is_array() && entry.size() == 2, "tokenizer.json: merge ", entry.dump(), " is not a pair");
    left = entry[0].get<std::string>();
    right = entry[1].get<std::string>();
  }
  return {std::move(left), std::move(right)};
}

// For each byte b, the id in m's vocabulary of b's byte-level alphabet character into byte_ids[b] and of "<0xNN>"
// into fallback_ids[b] (both [256]; -1 where the vocabulary lacks the token).
void find_byte_token_ids(const BpeModel& m, int32_t* byte_ids, int32_t* fallback_ids) {
  const auto& alphabet = ByteLevelAlphabet::get();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, alphabet.byte_to_char[b]);
    byte_ids[b] = m.find(ch);
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    fallback_ids[b] = m.find(hex);
  }
}

// The token a merge of left and right makes: right loses its continuing-subword prefix.
std::string merged_token(const std::string& left, const std::string& right, const std::string& prefix) {
  return left + right.substr(std::min(right.size(), prefix.size() * (right.rfind(prefix, 0) == 0)));
}

}  // namespace

void BpeModel::PairTable::insert(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
  uint64_t key = pair_key(left, right);
  for (uint64_t slot = pair_hash(key) & mask;; slot = (slot + 1) & mask) {
    if (slots[slot].key == key) return;  // a repeated merge keeps its first (lowest) rank
    if (slots[slot].key == kEmpty) {
      slots[slot] = Slot{key, rank, merged_id};
      return;
    }
  }
}

const BpeModel::PairTable::Slot* BpeModel::PairTable::find(int32_t left, int32_t right) const {
  uint64_t key = pair_key(left, right);
  for (uint64_t slot = pair_hash(key) & mask;; slot = (slot + 1) & mask) {
    if (slots[slot].key == key) return &slots[slot];
    if (slots[slot].key == kEmpty) return nullptr;
  }
}

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& model, bool byte_level) {
  const std::string type = model.value("type", "BPE");
  TS_CHECK(type == "BPE", "tokenizer.json: model type \"", type, "\" is not supported (only BPE)");
  TS_CHECK(model.contains("vocab") && model.at("vocab").is_object(), "tokenizer.json: model.vocab must be an object");
  auto m = std::make_unique<BpeModel>();
  m->byte_level_ = byte_level;
  auto str_or_empty = [&](const char* key) {
    return model.contains(key) && model.at(key).is_string() ? model.at(key).get<std::string>() : std::string();
  };
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->fuse_unk_ = model.value("fuse_unk", false);
  m->ignore_merges_ = model.value("ignore_merges", false);
  m->continuing_subword_prefix_ = str_or_empty("continuing_subword_prefix");
  m->end_of_word_suffix_ = str_or_empty("end_of_word_suffix");
  TS_CHECK(model.value("dropout", nlohmann::json()).is_null() || model.at("dropout").get<double>() == 0.0,
           "tokenizer.json: BPE dropout is not supported (found ", model.at("dropout").dump(), ")");

  m->id_to_token_ = read_vocab(model.at("vocab"), m->token_to_id_);

  std::string unk = str_or_empty("unk_token");
  if (!unk.empty()) {
    m->unk_id_ = m->find(unk);
    TS_CHECK(m->unk_id_ >= 0, "tokenizer.json: unk_token \"", unk, "\" is not in the vocabulary");
  }

  find_byte_token_ids(*m, m->byte_ids_, m->byte_fallback_ids_);

  if (!byte_level && m->continuing_subword_prefix_.empty() && m->end_of_word_suffix_.empty() &&
      m->find(kMetaspace) >= 0 && metaspace_only_starts_runs(m->token_to_id_))
    m->word_start_marker_ = kMetaspace;

  // Merges: rank = position in the list.
  const auto& merges = model.at("merges");
  m->pairs_.init(merges.size());
  int32_t rank = 0;
  for (const auto& entry : merges) {
    const auto [left, right] = merge_tokens(entry);
    int32_t left_id = m->find(left), right_id = m->find(right);
    int32_t merged_id = m->find(merged_token(left, right, m->continuing_subword_prefix_));
    TS_CHECK(left_id >= 0 && right_id >= 0 && merged_id >= 0, "tokenizer.json: merge #", rank, " (\"", left, "\", \"",
             right, "\") uses a token missing from the vocabulary");
    m->pairs_.insert(left_id, right_id, rank, merged_id);
    ++rank;
  }
  return m;
}

int32_t BpeModel::find(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.clear();
  if (byte_level_) {
    for (unsigned char b : piece) {
      int32_t id = byte_ids_[b];
      if (id < 0) id = unk_id_;
      TS_CHECK(id >= 0, "byte-level vocabulary has no token for byte 0x", std::hex, int(b), " and no unk_token");
      symbols.push_back(id);
    }
    return;
  }
  std::string symbol;
  bool previous_unk = false;
  for (size_t pos = 0; pos < piece.size();) {
    size_t start = pos;
    utf8_next(piece, pos);
    symbol.clear();
    if (start > 0) symbol += continuing_subword_prefix_;
    symbol.append(piece.substr(start, pos - start));
    if (pos == piece.size()) symbol += end_of_word_suffix_;
    int32_t id = find(symbol);
    if (id >= 0) {
      symbols.push_back(id);
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (size_t k = start; k < pos; ++k) all_bytes &= byte_fallback_ids_[static_cast<unsigned char>(piece[k])] >= 0;
      if (all_bytes) {
        for (size_t k = start; k < pos; ++k) symbols.push_back(byte_fallback_ids_[static_cast<unsigned char>(piece[k])]);
        previous_unk = false;
        continue;
      }
    }
    TS_CHECK(unk_id_ >= 0, "character \"", piece.substr(start, pos - start), "\" is not in the vocabulary and the "
             "tokenizer has no unk_token");
    if (!(fuse_unk_ && previous_unk)) symbols.push_back(unk_id_);
    previous_unk = true;
  }
}

void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const int n = int(symbols.size());
  if (n < 2) return;
  // Doubly linked list over positions; a merged pair keeps the left position, the right one is unlinked.
  thread_local std::vector<int32_t> prev, next;  // [n]
  prev.resize(n);
  next.resize(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {  // the pair (pos, next[pos]) = (left, right), which merges at `rank`
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Candidate> heap;  // min-heap on (rank, pos)
  heap.clear();
  auto push = [&](int pos) {
    int right = next[pos];
    if (right < 0) return;
    if (const auto* slot = pairs_.find(symbols[pos], symbols[right])) {
      heap.push_back({slot->rank, pos, symbols[pos], symbols[right]});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    Candidate c = heap.back();
    heap.pop_back();
    // Stale if either side changed since the candidate was pushed.
    int right = next[c.pos];
    if (symbols[c.pos] != c.left || right < 0 || symbols[right] != c.right) continue;
    symbols[c.pos] = pairs_.find(c.left, c.right)->merged;
    // Unlink `right`.
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    symbols[right] = -1;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  int out = 0;
  for (int i = 0; i >= 0; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (word_start_marker_.empty()) return encode_word(piece, out);
  // Split before each run of the marker (see word_start_marker_).
  const std::string& marker = word_start_marker_;
  size_t word_start = 0;
  for (size_t p = piece.find(marker, 1); p != std::string_view::npos; p = piece.find(marker, p + marker.size())) {
    if (p >= marker.size() && piece.compare(p - marker.size(), marker.size(), marker) == 0) continue;
    encode_word(piece.substr(word_start, p - word_start), out);
    word_start = p;
  }
  encode_word(piece.substr(word_start), out);
}

void BpeModel::encode_word(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  bool done = false;
  if (ignore_merges_) {  // a piece that is itself a token is taken whole
    int32_t id = -1;
    if (byte_level_) {
      std::string mapped;
      for (unsigned char b : piece) utf8_append(mapped, ByteLevelAlphabet::get().byte_to_char[b]);
      id = find(mapped);
    } else {
      id = find(piece);
    }
    if (id >= 0) {
      symbols.assign(1, id);
      done = true;
    }
  }
  if (!done) {
    initial_symbols(piece, symbols);
    merge(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), symbols);
  }
}

}  // namespace ts::tok
