#include "engine/block_pool.h"

#include "core/error.h"

namespace ts {

BlockPool::BlockPool(std::function<KVCache(int rows)> make, int block_tokens, int64_t slots, int chunk_slots)
    : make_(std::move(make)), block_tokens_(block_tokens), slots_(slots), chunk_slots_(chunk_slots) {
  TS_CHECK(block_tokens > 0 && block_tokens % 16 == 0 && slots >= 0 && chunk_slots > 0 &&
               int64_t(chunk_slots) * block_tokens < (int64_t(1) << 31),
           "block pool: bad shape");
  chunks_.resize(size_t((slots + chunk_slots - 1) / chunk_slots));
}

const KVCache& BlockPool::chunk(int64_t slot, int* first_row) const {
  TS_CHECK(slot >= 0 && slot < slots_, "block pool: slot ", slot, " outside [0, ", slots_, ")");
  const std::unique_ptr<KVCache>& c = chunks_[size_t(slot / chunk_slots_)];
  TS_CHECK(c != nullptr, "block pool: slot ", slot, " was never written");
  *first_row = int(slot % chunk_slots_) * block_tokens_;
  return *c;
}

void BlockPool::write(int64_t slot, int rows, const KVCache& from, int from_first) {
  TS_CHECK(slot >= 0 && slot < slots_ && rows >= 0 && rows <= block_tokens_, "block pool: bad write of ", rows,
           " rows to slot ", slot);
  std::unique_ptr<KVCache>& c = chunks_[size_t(slot / chunk_slots_)];
  if (!c) {
    const int chunk_rows = chunk_slots_ * block_tokens_;
    auto fresh = std::make_unique<KVCache>(make_(chunk_rows));
    fresh->begin_append(chunk_rows);  // allocates; pages are touched as slots are written
    fresh->commit_all();
    c = std::move(fresh);
  }
  c->overwrite_rows(int(slot % chunk_slots_) * block_tokens_, rows, from, from_first);
}

void BlockPool::share(int64_t slot, KVCache& cache) const {
  int first = 0;
  const KVCache& c = chunk(slot, &first);
  cache.share_rows(c, first, block_tokens_);
}

void BlockPool::copy(int64_t slot, int rows, KVCache& cache) const {
  int first = 0;
  const KVCache& c = chunk(slot, &first);
  cache.append_rows(c, first, rows);
}

int64_t BlockPool::release_unused(const std::function<bool(int64_t first_slot, int64_t n)>& free) {
  int64_t freed = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int64_t first = int64_t(c) * chunk_slots_;
    if (chunks_[c] && free(first, std::min<int64_t>(chunk_slots_, slots_ - first))) {
      chunks_[c].reset();
      ++freed;
    }
  }
  return freed;
}

int64_t BlockPool::chunks_allocated() const {
  int64_t n = 0;
  for (const auto& c : chunks_) n += c != nullptr;
  return n;
}

}  // namespace ts
