// The engine's prefix cache: KV rows of token blocks that earlier requests computed, kept for later requests whose
// context starts with the same tokens (a shared system prompt, the previous turns of a chat).
//
// The unit is a block of block_tokens consecutive tokens starting at a multiple of block_tokens. A block is named by
// the hash chain of its tokens: hash(block i) = H(hash(block i - 1) or the cache's salt, tokens of block i), so equal
// names mean equal prefixes up to and including the block, and one different token changes the name of its block
// and of every block after it. The salt carries what else changes the rows (the weight format, the KV dtypes).
// A block holds the target's KV rows of its tokens and, once a speculating request stored it, the drafter's context
// rows of the same tokens (both opaque bytes in KVCache::export_rows' layout).
//
// Names are 64-bit and not secret, so a crafted prompt could collide with another's block: a block matches only if
// its stored tokens equal the query's, and its parent is the very entry matched for the block before (by serial
// number, not by name), so a collision costs a miss, never a wrong row.
//
// Blocks are read by admission (copied into the admitted request's own cache), pinned while that happens
// (acquire/release: a pinned block is never evicted), and evicted least recently used otherwise; a prefix's later
// blocks are evicted before its earlier ones. What was stored and removed is queued as vLLM-style events
// (kv_events.h) for prefix-aware routers. Plain data, no model: tests/engine/prefix_cache_test.cc drives it alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/kv_events.h"

namespace ts {

class PrefixCache {
 public:
  struct Block {
    uint64_t name = 0;
    uint64_t serial = 0;                // unique per stored entry, never reused
    uint64_t parent_serial = 0;         // the entry of the block before; 0 for a prefix's first block
    std::optional<uint64_t> parent_name;
    std::vector<int32_t> tokens;        // [block_tokens]
    std::vector<uint8_t> target_rows;   // [block_tokens * target bytes per row] (KVCache::export_rows)
    std::vector<uint8_t> drafter_rows;  // [block_tokens * drafter bytes per row]; empty until a drafter stored it
    int refs = 0;                       // admissions reading it now (acquire / release)
    uint64_t last_use = 0;              // LRU stamp
  };

  // block_tokens >= 1; salt: identifies the models' weights and KV dtypes (see above).
  PrefixCache(int block_tokens, uint64_t salt);

  int block_tokens() const { return block_tokens_; }
  int64_t blocks() const { return int64_t(blocks_.size()); }
  int64_t rows() const { return blocks() * block_tokens_; }  // token rows held

  // The names of the whole blocks of tokens[0, n): [n / block_tokens].
  std::vector<uint64_t> chain(const int32_t* tokens, int n) const;

  // The leading blocks of tokens[0, n) the cache holds (with drafter rows when need_drafter), in order; chain:
  // chain(tokens, n) (passed in so a request hashes its prompt once). Does not touch LRU stamps.
  std::vector<const Block*> match(const int32_t* tokens, int n, const std::vector<uint64_t>& chain,
                                  bool need_drafter) const;

  // Pin / unpin matched blocks (refs); acquire also marks them used now (later blocks older, so they go first).
  void acquire(const std::vector<const Block*>& blocks);
  void release(const std::vector<const Block*>& blocks);

  // Stores the whole blocks of a context: tokens[0, n) with its rows, chain = chain(tokens, n). For block i,
  // target_rows(i, out) and drafter_rows(i, out) write its rows into the block's buffer (std::vector<uint8_t>&),
  // called only for rows the cache lacks; drafter_rows returns false when it has none to store (e.g. a request
  // without a drafter, or blocks past its drafter context). A block already held is marked used (and gains drafter
  // rows it lacked); storing stops at a name held by different tokens. Before each new block, evicts down to
  // max_rows - block_tokens rows; when that cannot make room (pinned blocks) the rest is not stored.
  // Returns the number of new blocks.
  template <typename TargetRows, typename DrafterRows>
  int store(const int32_t* tokens, int n, const std::vector<uint64_t>& chain, int64_t max_rows,
            TargetRows target_rows, DrafterRows drafter_rows);

  // Evicts least recently used unpinned blocks until rows() <= max_rows (or only pinned ones remain).
  void evict_to(int64_t max_rows);
  void clear();  // every block (pinned ones must not exist); queues AllBlocksCleared

  std::vector<const Block*> all() const;  // every block held, in no particular order
  // Events since the last call, in order.
  std::vector<KvCacheEvent> take_events();

 private:
  Block* find(uint64_t name);
  // Inserts a new entry without rows (store() fills them); returns null when there is no room.
  Block* insert(uint64_t name, const Block* parent, const int32_t* tokens, int64_t max_rows);
  void touch(Block& b, uint64_t stamp);
  void note_stored(const Block& b);
  void remove(Block& b);

  int block_tokens_;
  uint64_t salt_;
  uint64_t clock_ = 0;
  uint64_t next_serial_ = 1;
  std::unordered_map<uint64_t, Block> blocks_;           // by name
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> lru_;  // (last_use, serial) -> name, unpinned and pinned
  std::vector<KvCacheEvent> events_;
};

template <typename TargetRows, typename DrafterRows>
int PrefixCache::store(const int32_t* tokens, int n, const std::vector<uint64_t>& chain, int64_t max_rows,
                       TargetRows target_rows, DrafterRows drafter_rows) {
  const int whole = std::min<int>(int(chain.size()), n / block_tokens_);
  const uint64_t stamp = clock_ + whole + 1;
  clock_ = stamp + 1;
  const Block* parent = nullptr;
  std::vector<Block*> held;  // pinned while the rest is stored, so making room never evicts them
  int added = 0;
  for (int i = 0; i < whole; ++i) {
    const int32_t* block_tokens = tokens + int64_t(i) * block_tokens_;
    Block* b = find(chain[i]);
    if (b) {
      const bool same = b->parent_serial == (parent ? parent->serial : 0) &&
                        std::equal(b->tokens.begin(), b->tokens.end(), block_tokens);
      if (!same) break;  // a name collision: keep the held block, store nothing after it
      if (b->drafter_rows.empty() && !drafter_rows(i, b->drafter_rows)) b->drafter_rows.clear();
    } else {
      b = insert(chain[i], parent, block_tokens, max_rows);
      if (!b) break;
      target_rows(i, b->target_rows);
      if (!drafter_rows(i, b->drafter_rows)) b->drafter_rows.clear();
      note_stored(*b);
      ++added;
    }
    touch(*b, stamp - i);  // earlier blocks newer: a prefix is evicted from its end
    ++b->refs;
    held.push_back(b);
    parent = b;
  }
  for (Block* b : held) --b->refs;
  return added;
}

}  // namespace ts
