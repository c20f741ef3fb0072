// The engine's prefix cache: KV rows of token blocks that earlier requests computed, kept for later requests whose
// context starts with the same tokens (a shared system prompt, the previous turns of a chat).
//
// The unit is a block of block_tokens consecutive tokens starting at a multiple of block_tokens. A block is named by
// the hash chain of its tokens: hash(block i) = H(hash(block i - 1) or the cache's salt, tokens of block i), so equal
// names mean equal prefixes up to and including the block, and one different token changes the name of its block
// and of every block after it. The salt carries what else changes the rows (the weight format, the KV dtypes).
// A block's rows live in a slot of the engine's block pools (one for the target's KV rows, one for the drafter's
// context rows, which a block has once a speculating request stored it): slot s holds rows [s, s + 1) x block_tokens
// of each pool. The cache hands out slots and the engine copies rows in and reads them in place. A prefix's blocks
// are put in consecutive slots where they can be (the slot after the block before it, else the first run of free
// slots long enough for the blocks being stored), so a request reads a cached prefix as a few long runs of rows.
//
// A request that ends leaves its context's last partial block too, as a tail: an entry of fewer than block_tokens
// tokens under its last whole block (a chat's next turn starts with that context, so it reuses every row of it, not
// only its whole blocks). match_tail finds, after the blocks a query matched, the entry under the last of them that
// shares the most leading tokens with the query's next ones: a tail, or another request's block that diverges from
// the query mid-way (a shared system prompt that ends inside a block). Those rows are copied into the request's own
// cache (they are not whole key tiles), not read in place. Tails take a slot like blocks, are never announced to
// routers (vLLM's events name whole blocks only), and go when a whole block that starts with their tokens arrives.
//
// Names are 64-bit and not secret, so a crafted prompt could collide with another's block: a block matches only if
// its stored tokens equal the query's, and its parent is the very entry matched for the block before (by serial
// number, not by name), so a collision costs a miss, never a wrong row.
//
// Blocks are read in place by the requests whose prompts start with them (KVCache::share_rows), pinned while any such
// request lives (acquire/release: a pinned block is never evicted), and evicted least recently used otherwise; a
// prefix's later blocks are evicted before its earlier ones. What was stored and removed is queued as vLLM-style events
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
    std::vector<int32_t> tokens;        // [block_tokens], or fewer for a tail
    int slot = -1;                      // where its rows are in the pools
    bool has_drafter = false;           // the drafter pool's slot holds its rows (a speculating request stored it)
    int refs = 0;                       // admissions reading it now (acquire / release)
    uint64_t last_use = 0;              // LRU stamp
  };

  // block_tokens >= 1; salt: identifies the models' weights and KV dtypes (see above); slots: the pools' size in
  // blocks (the most blocks held at once).
  PrefixCache(int block_tokens, uint64_t salt, int64_t slots);

  int block_tokens() const { return block_tokens_; }
  int64_t slots() const { return slots_; }
  // Whether slots [first, first + n) are all free (no entry holds one).
  bool slots_free(int64_t first, int64_t n) const;
  int64_t entries() const { return int64_t(blocks_.size()); }  // whole blocks and tails: the slots in use
  int64_t blocks() const { return entries() - tails_; }        // whole blocks (the ones events announce)
  int64_t rows() const { return entries() * block_tokens_; }   // token rows the slots in use hold
  int64_t pinned_rows() const { return pinned_blocks_ * block_tokens_; }  // rows of blocks acquired now

  // The names of the whole blocks of tokens[0, n): [n / block_tokens].
  std::vector<uint64_t> chain(const int32_t* tokens, int n) const;

  // The leading blocks of tokens[0, n) the cache holds (with drafter rows when need_drafter), in order; chain:
  // chain(tokens, n) (passed in so a request hashes its prompt once). Does not touch LRU stamps.
  std::vector<const Block*> match(const int32_t* tokens, int n, const std::vector<uint64_t>& chain,
                                  bool need_drafter) const;

  // The entry under the last of `hit` (match()'s blocks of the same query; none when it is empty) sharing the most
  // leading tokens with tokens[hit.size() * block_tokens, n), with drafter rows when need_drafter: its first `rows`
  // rows are the query's next rows (0 < rows < block_tokens; {} when none shares a token).
  struct Tail {
    const Block* block = nullptr;
    int rows = 0;
  };
  Tail match_tail(const int32_t* tokens, int n, const std::vector<const Block*>& hit, bool need_drafter) const;

  // Pin / unpin matched blocks (refs; a block may be pinned by several requests at once); acquire also marks them
  // used now (later blocks older, so they go first).
  void acquire(const std::vector<const Block*>& blocks);
  void release(const std::vector<const Block*>& blocks);

  // Stores the whole blocks of a context: tokens[0, n) with its rows, chain = chain(tokens, n), and with `tail` its
  // last partial block too (n % block_tokens tokens; after all its whole blocks only). For block i (the tail:
  // i = n / block_tokens), target_rows(i, slot, rows) and drafter_rows(i, slot, rows) write its first `rows` rows
  // (block_tokens, or the tail's) into the pools' slot `slot`, called only for rows the cache lacks; drafter_rows
  // returns false when it has none to store (e.g. a request without a drafter, or blocks past its drafter context).
  // A block already held is marked used (and gains drafter rows it lacked); storing stops at a name held by
  // different tokens. Before each new entry, evicts down to max_rows - block_tokens rows; when that cannot make room
  // (pinned blocks, or no free slot) the rest is not stored. A new whole block removes the unpinned tails under the
  // same parent that its tokens start with. Returns the number of new entries.
  template <typename TargetRows, typename DrafterRows>
  int store(const int32_t* tokens, int n, const std::vector<uint64_t>& chain, int64_t max_rows,
            TargetRows target_rows, DrafterRows drafter_rows, bool tail = false);

  // Evicts least recently used unpinned entries until rows() <= max_rows (or only pinned ones remain).
  void evict_to(int64_t max_rows);
  void clear();  // every block (pinned ones must not exist); queues AllBlocksCleared

  std::vector<const Block*> all() const;  // every block held, in no particular order
  // Events since the last call, in order.
  std::vector<KvCacheEvent> take_events();

 private:
  Block* find(uint64_t name);
  // Inserts a new entry of n tokens without rows (store() fills them) in a free slot; returns null when there is no
  // room.
  // `run`: the blocks this store may still add, this one included (the length of free run it looks for).
  Block* insert(uint64_t name, const Block* parent, const int32_t* tokens, int n, int64_t max_rows, int run);
  uint64_t tail_name(const Block& parent, const int32_t* tokens, int n) const;
  // A free slot: `after` + 1 when free, else the start of the first free run of at least `run` slots, else of the
  // longest one; -1 when none is free.
  int64_t take_slot(int64_t after, int run);
  void free_slot(int64_t slot);
  // Removes the unpinned tails under `parent` whose tokens start `tokens` (n of them): a new entry holds their rows.
  void drop_tails(const Block* parent, const int32_t* tokens, int n);
  bool is_tail(const Block& b) const { return int(b.tokens.size()) < block_tokens_; }
  void touch(Block& b, uint64_t stamp);
  void note_stored(const Block& b);
  void remove(Block& b);

  int block_tokens_;
  uint64_t salt_;
  int64_t slots_;
  std::map<int64_t, int64_t> free_runs_;  // free slots: first slot -> run length, runs disjoint and not adjacent
  uint64_t clock_ = 0;
  uint64_t next_serial_ = 1;
  int64_t tails_ = 0;          // entries that are tails
  int64_t pinned_blocks_ = 0;  // blocks with refs > 0 from acquire (store's own brief pins are not counted)
  std::unordered_map<uint64_t, Block> blocks_;           // by name
  std::unordered_multimap<uint64_t, uint64_t> children_;  // parent serial -> names of the entries under it
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> lru_;  // (last_use, serial) -> name, unpinned and pinned
  std::vector<KvCacheEvent> events_;
};

template <typename TargetRows, typename DrafterRows>
int PrefixCache::store(const int32_t* tokens, int n, const std::vector<uint64_t>& chain, int64_t max_rows,
                       TargetRows target_rows, DrafterRows drafter_rows, bool tail) {
  const int whole = std::min<int>(int(chain.size()), n / block_tokens_);
  const int tail_rows = tail && whole == n / block_tokens_ ? n - whole * block_tokens_ : 0;
  const int entries = whole + (tail_rows > 0);
  const uint64_t stamp = clock_ + entries + 1;
  clock_ = stamp + 1;
  const Block* parent = nullptr;
  std::vector<Block*> held;  // pinned while the rest is stored, so making room never evicts them
  int added = 0;
  for (int i = 0; i < entries; ++i) {
    const int rows = i < whole ? block_tokens_ : tail_rows;
    if (i == whole && !parent) break;  // a tail needs its whole blocks (none: nothing to hang it under)
    const int32_t* entry_tokens = tokens + int64_t(i) * block_tokens_;
    const uint64_t name = i < whole ? chain[i] : tail_name(*parent, entry_tokens, rows);
    Block* b = find(name);
    if (b) {
      const bool same = b->parent_serial == (parent ? parent->serial : 0) && int(b->tokens.size()) == rows &&
                        std::equal(b->tokens.begin(), b->tokens.end(), entry_tokens);
      if (!same) break;  // a name collision: keep the held block, store nothing after it
      if (!b->has_drafter) b->has_drafter = drafter_rows(i, b->slot, rows);
    } else {
      drop_tails(parent, entry_tokens, rows);
      b = insert(name, parent, entry_tokens, rows, max_rows, entries - i);
      if (!b) break;
      target_rows(i, b->slot, rows);
      b->has_drafter = drafter_rows(i, b->slot, rows);
      if (i < whole) note_stored(*b);
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
