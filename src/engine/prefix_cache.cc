#include "engine/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace ts {

namespace {

// 64-bit multiply-fold mixing (the wyhash family's step): fast, and every input bit reaches every output bit.
inline uint64_t mix(uint64_t a, uint64_t b) {
  const __uint128_t p = __uint128_t(a ^ 0xa0761d6478bd642fULL) * (b ^ 0xe7037ed1a0b428dbULL);
  return uint64_t(p) ^ uint64_t(p >> 64);
}

uint64_t block_name(uint64_t parent, const int32_t* tokens, int n) {
  uint64_t h = mix(parent, uint64_t(n));
  for (int i = 0; i < n; i += 2) {
    const uint64_t pair = uint64_t(uint32_t(tokens[i])) | (i + 1 < n ? uint64_t(uint32_t(tokens[i + 1])) << 32 : 0);
    h = mix(h, pair);
  }
  return mix(h, 0x8ebc6af09c88c6e3ULL);
}

}  // namespace

PrefixCache::PrefixCache(int block_tokens, uint64_t salt, int64_t slots)
    : block_tokens_(block_tokens), salt_(salt), slots_(slots) {
  TS_CHECK(block_tokens >= 1, "prefix cache: block_tokens must be >= 1, got ", block_tokens);
  TS_CHECK(slots >= 0 && slots <= (int64_t(1) << 31) / block_tokens, "prefix cache: bad slot count ", slots);
  if (slots > 0) free_runs_[0] = slots;
}

int64_t PrefixCache::take_slot(int64_t after, int run) {
  if (free_runs_.empty()) return -1;
  auto pick = free_runs_.end();
  if (after >= 0) pick = free_runs_.find(after + 1);  // free and right after: a run starts there
  for (auto it = free_runs_.begin(); pick == free_runs_.end() && it != free_runs_.end(); ++it)
    if (it->second >= run) pick = it;
  if (pick == free_runs_.end())
    pick = std::max_element(free_runs_.begin(), free_runs_.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; });
  const auto [slot, length] = *pick;
  free_runs_.erase(pick);
  if (length > 1) free_runs_[slot + 1] = length - 1;
  return slot;
}

bool PrefixCache::slots_free(int64_t first, int64_t n) const {
  auto it = free_runs_.upper_bound(first);  // runs are disjoint and not adjacent: one run must cover them all
  if (it == free_runs_.begin()) return false;
  --it;
  return it->first <= first && first + n <= it->first + it->second;
}

void PrefixCache::free_slot(int64_t slot) {
  int64_t first = slot, length = 1;
  auto next = free_runs_.find(slot + 1);
  if (next != free_runs_.end()) {
    length += next->second;
    free_runs_.erase(next);
  }
  auto prev = free_runs_.lower_bound(slot);
  if (prev != free_runs_.begin() && (--prev)->first + prev->second == slot) {
    first = prev->first;
    length += prev->second;
  }
  free_runs_[first] = length;
}

std::vector<uint64_t> PrefixCache::chain(const int32_t* tokens, int n) const {
  std::vector<uint64_t> names(size_t(std::max(0, n / block_tokens_)));
  uint64_t parent = salt_;
  for (size_t i = 0; i < names.size(); ++i) {
    names[i] = block_name(parent, tokens + i * block_tokens_, block_tokens_);
    parent = names[i];
  }
  return names;
}

PrefixCache::Block* PrefixCache::find(uint64_t name) {
  auto it = blocks_.find(name);
  return it == blocks_.end() ? nullptr : &it->second;
}

std::vector<const PrefixCache::Block*> PrefixCache::match(const int32_t* tokens, int n,
                                                          const std::vector<uint64_t>& chain,
                                                          bool need_drafter) const {
  std::vector<const Block*> hit;
  const int whole = std::min<int>(int(chain.size()), n / block_tokens_);
  uint64_t parent_serial = 0;
  for (int i = 0; i < whole; ++i) {
    auto it = blocks_.find(chain[i]);
    if (it == blocks_.end()) break;
    const Block& b = it->second;
    if (b.parent_serial != parent_serial || (need_drafter && !b.has_drafter) ||
        !std::equal(b.tokens.begin(), b.tokens.end(), tokens + int64_t(i) * block_tokens_))
      break;
    hit.push_back(&b);
    parent_serial = b.serial;
  }
  return hit;
}

void PrefixCache::touch(Block& b, uint64_t stamp) {
  lru_.erase({b.last_use, b.serial});
  b.last_use = stamp;
  lru_[{b.last_use, b.serial}] = b.name;
}

void PrefixCache::acquire(const std::vector<const Block*>& blocks) {
  const uint64_t stamp = clock_ + blocks.size() + 1;
  clock_ = stamp + 1;
  for (size_t i = 0; i < blocks.size(); ++i) {
    Block& b = *find(blocks[i]->name);
    if (b.refs++ == 0) pinned_blocks_ += 1;
    touch(b, stamp - i);
  }
}

void PrefixCache::release(const std::vector<const Block*>& blocks) {
  for (const Block* c : blocks) {
    Block& b = *find(c->name);
    TS_CHECK(b.refs > 0, "prefix cache: release of an unpinned block");
    if (--b.refs == 0) pinned_blocks_ -= 1;
  }
}

uint64_t PrefixCache::tail_name(const Block& parent, const int32_t* tokens, int n) const {
  return block_name(parent.name, tokens, n);  // n < block_tokens is hashed in: never a whole block's name
}

PrefixCache::Tail PrefixCache::match_tail(const int32_t* tokens, int n, const std::vector<const Block*>& hit,
                                          bool need_drafter) const {
  Tail best;
  if (hit.empty()) return best;  // entries under no parent are not searched (every prefix's first block)
  const int64_t at = int64_t(hit.size()) * block_tokens_;
  const int left = int(std::min<int64_t>(n - at, block_tokens_ - 1));
  const auto [first, last] = children_.equal_range(hit.back()->serial);
  for (auto it = first; it != last; ++it) {
    const Block& b = blocks_.at(it->second);
    if (need_drafter && !b.has_drafter) continue;
    const int most = std::min<int>(left, int(b.tokens.size()));
    int common = 0;
    while (common < most && b.tokens[common] == tokens[at + common]) ++common;
    if (common > best.rows) best = {&b, common};
  }
  return best;
}

void PrefixCache::drop_tails(const Block* parent, const int32_t* tokens, int n) {
  if (!parent) return;
  std::vector<uint64_t> superseded;
  const auto [first, last] = children_.equal_range(parent->serial);
  for (auto it = first; it != last; ++it) {
    const Block& b = blocks_.at(it->second);
    const bool starts = int(b.tokens.size()) <= n && std::equal(b.tokens.begin(), b.tokens.end(), tokens);
    if (is_tail(b) && b.refs == 0 && starts) superseded.push_back(b.name);
  }
  for (uint64_t name : superseded) remove(*find(name));
}

PrefixCache::Block* PrefixCache::insert(uint64_t name, const Block* parent, const int32_t* tokens, int n,
                                        int64_t max_rows, int run) {
  evict_to(max_rows - block_tokens_);
  if (rows() + block_tokens_ > max_rows) return nullptr;
  const int64_t slot = take_slot(parent ? parent->slot : -1, run);
  if (slot < 0) return nullptr;
  Block& b = blocks_[name];
  b.slot = int(slot);
  b.name = name;
  b.serial = next_serial_++;
  b.parent_serial = parent ? parent->serial : 0;
  if (parent) b.parent_name = parent->name;
  b.tokens.assign(tokens, tokens + n);
  tails_ += is_tail(b);
  if (parent) children_.emplace(parent->serial, name);
  return &b;
}

void PrefixCache::note_stored(const Block& b) {
  // Consecutive blocks of one prefix go in one BlockStored event, as vLLM batches a request's new blocks.
  if (!events_.empty() && events_.back().kind == KvCacheEvent::Kind::BlockStored && b.parent_name &&
      events_.back().block_hashes.back() == *b.parent_name) {
    events_.back().block_hashes.push_back(b.name);
    events_.back().token_ids.insert(events_.back().token_ids.end(), b.tokens.begin(), b.tokens.end());
    return;
  }
  KvCacheEvent e;
  e.kind = KvCacheEvent::Kind::BlockStored;
  e.block_hashes = {b.name};
  e.parent_block_hash = b.parent_name;
  e.token_ids = b.tokens;
  e.block_size = block_tokens_;
  events_.push_back(std::move(e));
}

void PrefixCache::remove(Block& b) {
  if (!is_tail(b)) {  // tails were never announced
    if (events_.empty() || events_.back().kind != KvCacheEvent::Kind::BlockRemoved) {
      events_.emplace_back();
      events_.back().kind = KvCacheEvent::Kind::BlockRemoved;
    }
    events_.back().block_hashes.push_back(b.name);
  }
  if (b.parent_serial != 0) {
    const auto [first, last] = children_.equal_range(b.parent_serial);
    for (auto it = first; it != last; ++it)
      if (it->second == b.name) {
        children_.erase(it);
        break;
      }
  }
  lru_.erase({b.last_use, b.serial});
  tails_ -= is_tail(b);
  free_slot(b.slot);
  blocks_.erase(b.name);
}

void PrefixCache::evict_to(int64_t max_rows) {
  for (auto it = lru_.begin(); it != lru_.end() && rows() > max_rows;) {
    Block& b = *find(it->second);
    ++it;  // remove() erases b's entry
    if (b.refs == 0) remove(b);
  }
}

void PrefixCache::clear() {
  for (const auto& [name, b] : blocks_) TS_CHECK(b.refs == 0, "prefix cache: clear() with pinned blocks");
  const bool had = !blocks_.empty();
  blocks_.clear();
  lru_.clear();
  children_.clear();
  tails_ = 0;
  free_runs_.clear();
  if (slots_ > 0) free_runs_[0] = slots_;
  if (had) {
    events_.emplace_back();
    events_.back().kind = KvCacheEvent::Kind::AllBlocksCleared;
  }
}

std::vector<const PrefixCache::Block*> PrefixCache::all() const {
  std::vector<const Block*> out;
  for (const auto& [name, b] : blocks_) out.push_back(&b);
  return out;
}

std::vector<KvCacheEvent> PrefixCache::take_events() {
  std::vector<KvCacheEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace ts
