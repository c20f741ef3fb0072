// The BPE model of a tokenizer.json: vocabulary, merges ranked by their order in the file, and the encoding of
// one pre-tokenized piece into ids.
//
// Merges are looked up by the pair of ids (a flat open-addressing table: (left id, right id) -> rank, merged id),
// and one piece is merged with a heap ordered by (rank, position), which is what the reference does: the
// lowest-ranked pair first, the leftmost among equals. Results for short pieces are cached (text is Zipfian, so
// most words repeat); the cache is shared by threads behind a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ts::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" (type BPE). `byte_level`: pieces arrive as raw bytes and each byte maps
  // to the id of its GPT-2 alphabet character.
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, bool byte_level);

  // Appends the ids of one piece to `out`.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  int32_t find(std::string_view token) const;  // -1 if not in the vocabulary
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }  // [max id + 1], "" for holes
  bool byte_fallback() const { return byte_fallback_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct PairTable {  // (left id, right id) -> (rank, merged id); open addressing, linear probing
    struct Slot {      // one 16-byte slot: a probe touches one cache line
      uint64_t key;    // left << 32 | right, or kEmpty
      int32_t rank;
      int32_t merged;
    };
    std::vector<Slot> slots;  // [capacity]
    uint64_t mask = 0;
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    void init(size_t n);
    void insert(int32_t left, int32_t right, int32_t rank, int32_t merged_id);
    const Slot* find(int32_t left, int32_t right) const;  // nullptr if the pair never merges
  };

  void encode_word(std::string_view word, std::vector<int32_t>& out) const;  // one piece, through the cache
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge(std::vector<int32_t>& symbols) const;

  TokenMap token_to_id_;
  std::vector<std::string> id_to_token_;
  PairTable pairs_;
  int32_t byte_ids_[256];  // byte-level: id of each byte's alphabet character (-1 if absent)
  int32_t byte_fallback_ids_[256];  // id of "<0xNN>" (-1 if absent)
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  // SentencePiece-style files have no pre-tokenizer, so a whole text is one piece. When no vocabulary token has
  // "▁" right after another character (checked at load), no merge can cross the start of a run of "▁", and
  // encoding the text split there gives the same ids while each word hits the cache. Empty when unsafe.
  std::string word_start_marker_;

  // Piece -> ids cache for pieces up to kMaxCachedPiece bytes, cleared when it holds kMaxCacheEntries.
  static constexpr size_t kMaxCachedPiece = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace ts::tok
