// The prefix cache's rows of one model (engine/prefix_cache.h): slot s holds block_tokens rows, in chunks of
// chunk_slots slots, each chunk a KV cache in the request caches' layout allocated when one of its slots is first
// written and never grown (requests' spans point into it). Chunks keep the engine from reserving the whole KV budget
// up front: a budget far larger than what the cache ever holds costs nothing.
//
// Slots of one chunk are rows of one buffer, so consecutive slots there are one run of rows (one span for a request
// that shares them); a run that crosses into the next chunk is two.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/kv_cache.h"

namespace ts {

class BlockPool {
 public:
  BlockPool() = default;
  // make(rows): an empty KV cache of the model's shape and dtype holding up to `rows` rows.
  BlockPool(std::function<KVCache(int rows)> make, int block_tokens, int64_t slots, int chunk_slots);

  // Writes the slot's first `rows` rows (<= block_tokens) from rows [from_first, from_first + rows) of `from`
  // (from_first a multiple of 16); allocates the slot's chunk if it has none.
  void write(int64_t slot, int rows, const KVCache& from, int from_first);
  // Appends the slot's rows to `cache` as shared rows, read in place (KVCache::share_rows). Reading a slot whose
  // chunk was never written throws (the prefix cache reads only slots it wrote).
  void share(int64_t slot, KVCache& cache) const;
  // Appends the slot's first `rows` rows to `cache` as copies (KVCache::append_rows).
  void copy(int64_t slot, int rows, KVCache& cache) const;

  int64_t chunks_allocated() const;
  // Frees every allocated chunk whose slots are all free (free(first_slot, n): slots [first_slot, first_slot + n)
  // hold nothing; the prefix cache knows). Returns the chunks freed.
  int64_t release_unused(const std::function<bool(int64_t first_slot, int64_t n)>& free);

 private:
  const KVCache& chunk(int64_t slot, int* first_row) const;  // the slot's chunk (allocated) and its first row there

  std::function<KVCache(int rows)> make_;
  int block_tokens_ = 0;
  int64_t slots_ = 0;
  int chunk_slots_ = 0;
  std::vector<std::unique_ptr<KVCache>> chunks_;  // [ceil(slots / chunk_slots)], null until first written
};

}  // namespace ts
