// The prefix cache alone (no model): block names, matching, pins, LRU eviction under a row limit, and the events
// it queues for routers.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "engine/prefix_cache.h"

namespace ts {
namespace {

constexpr int kBlock = 4;

std::vector<int32_t> tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// What the pools' slots hold: a value that says which context and block stored it (tag * 16 + block), and how many
// rows (a tail's fewer).
std::map<int, int> target_pool, drafter_pool, target_rows;
struct FakeRows {
  std::map<int, int>* pool;
  int tag;
  bool operator()(int i, int slot, int rows) const {
    (*pool)[slot] = tag * 16 + i;
    if (pool == &target_pool) target_rows[slot] = rows;
    return true;
  }
};
struct NoRows {
  bool operator()(int, int, int) const { return false; }
};

int store(PrefixCache& cache, const std::vector<int32_t>& t, int tag, int64_t max_rows = 1 << 20,
          bool drafter = false, bool tail = false) {
  const auto chain = cache.chain(t.data(), int(t.size()));
  if (drafter)
    return cache.store(t.data(), int(t.size()), chain, max_rows, FakeRows{&target_pool, tag},
                       FakeRows{&drafter_pool, tag + 8}, tail);
  return cache.store(t.data(), int(t.size()), chain, max_rows, FakeRows{&target_pool, tag}, NoRows{}, tail);
}

int matched(const PrefixCache& cache, const std::vector<int32_t>& t, bool need_drafter = false) {
  return int(cache.match(t.data(), int(t.size()), cache.chain(t.data(), int(t.size())), need_drafter).size());
}

TEST(PrefixCache, EqualPrefixesShareNamesAndOneTokenChangesTheRest) {
  PrefixCache cache(kBlock, 7, 64);
  const auto a = tokens(13), b = tokens(13);
  auto c = tokens(13);
  c[5] = 9;  // block 1
  const auto na = cache.chain(a.data(), 13), nb = cache.chain(b.data(), 13), nc = cache.chain(c.data(), 13);
  ASSERT_EQ(na.size(), 3u);  // whole blocks only
  EXPECT_EQ(na, nb);
  EXPECT_EQ(nc[0], na[0]);
  EXPECT_NE(nc[1], na[1]);
  EXPECT_NE(nc[2], na[2]);  // the chain carries the difference forward
  // The same tokens under another salt (another weight format) are other blocks.
  PrefixCache other(kBlock, 8, 64);
  EXPECT_NE(other.chain(a.data(), 13)[0], na[0]);
  // A block's name depends on its position in the chain, not only on its tokens.
  std::vector<int32_t> repeat(8, 5);
  const auto nr = cache.chain(repeat.data(), 8);
  EXPECT_NE(nr[0], nr[1]);
}

TEST(PrefixCache, MatchReturnsTheLeadingHeldBlocksWithTheirRows) {
  PrefixCache cache(kBlock, 1, 64);
  EXPECT_EQ(store(cache, tokens(10), 1), 2);  // 2 whole blocks
  EXPECT_EQ(cache.rows(), 8);
  EXPECT_EQ(store(cache, tokens(10), 2), 0);  // already held
  auto longer = tokens(17);
  const auto hit = cache.match(longer.data(), 17, cache.chain(longer.data(), 17), false);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(target_pool.at(hit[0]->slot), 1 * 16 + 0);  // the first storer's rows
  EXPECT_EQ(target_pool.at(hit[1]->slot), 1 * 16 + 1);
  auto diverged = tokens(17);
  diverged[6] = 0;
  EXPECT_EQ(matched(cache, diverged), 1);
  diverged[0] = 0;
  EXPECT_EQ(matched(cache, diverged), 0);
  // A query shorter than a block matches nothing.
  EXPECT_EQ(matched(cache, tokens(3)), 0);
}

TEST(PrefixCache, DrafterRowsAreNeededOnlyBySpeculatingRequestsAndAddedLater) {
  PrefixCache cache(kBlock, 1, 64);
  store(cache, tokens(12), 1);  // a plain request: target rows only
  EXPECT_EQ(matched(cache, tokens(12)), 3);
  EXPECT_EQ(matched(cache, tokens(12), true), 0);
  store(cache, tokens(8), 2, 1 << 20, true);  // a speculating one adds drafter rows to the first two
  EXPECT_EQ(matched(cache, tokens(12), true), 2);
  const auto t = tokens(12);
  const auto hit = cache.match(t.data(), 12, cache.chain(t.data(), 12), true);
  EXPECT_EQ(target_pool.at(hit[0]->slot), 1 * 16);  // target rows stay the first storer's
  EXPECT_EQ(drafter_pool.at(hit[0]->slot), 10 * 16);
}

TEST(PrefixCache, EvictionIsLeastRecentlyUsedFromThePrefixEndAndSparesPinnedBlocks) {
  PrefixCache cache(kBlock, 1, 64);
  const auto a = tokens(8, 100), b = tokens(8, 200), c = tokens(8, 300);
  store(cache, a, 1);
  store(cache, b, 2);
  store(cache, c, 3);
  EXPECT_EQ(cache.blocks(), 6);
  // a used again: b is now the least recently used.
  auto hit_a = cache.match(a.data(), 8, cache.chain(a.data(), 8), false);
  cache.acquire(hit_a);
  cache.release(hit_a);
  cache.evict_to(20);  // one block goes: b's second
  EXPECT_EQ(matched(cache, b), 1);
  EXPECT_EQ(matched(cache, a), 2);
  EXPECT_EQ(matched(cache, c), 2);
  // Pinned blocks stay whatever the pressure; the limit is met as far as unpinned blocks allow.
  auto hit_c = cache.match(c.data(), 8, cache.chain(c.data(), 8), false);
  cache.acquire(hit_c);
  cache.evict_to(0);
  EXPECT_EQ(cache.blocks(), 2);
  EXPECT_EQ(matched(cache, c), 2);
  EXPECT_EQ(hit_c[0]->refs, 1);
  cache.release(hit_c);
  EXPECT_EQ(hit_c[0]->refs, 0);  // references return to zero
  EXPECT_THROW(cache.release(hit_c), Error);
  cache.evict_to(0);
  EXPECT_EQ(cache.blocks(), 0);
}

TEST(PrefixCache, StoringRespectsTheRowLimitAndNeverEvictsItsOwnPrefix) {
  PrefixCache cache(kBlock, 1, 64);
  store(cache, tokens(8, 100), 1);
  // Limit 12 rows: storing 4 blocks of a new prefix evicts the old prefix, then stops at the limit.
  EXPECT_EQ(store(cache, tokens(16, 500), 2, 12), 3);
  EXPECT_EQ(cache.rows(), 12);
  EXPECT_EQ(matched(cache, tokens(8, 100)), 0);
  EXPECT_EQ(matched(cache, tokens(16, 500)), 3);
  // With everything pinned nothing new is stored.
  const auto t = tokens(16, 500);
  auto hit = cache.match(t.data(), 16, cache.chain(t.data(), 16), false);
  cache.acquire(hit);
  EXPECT_EQ(store(cache, tokens(8, 900), 3, 12), 0);
  cache.release(hit);
}

// Slots: a prefix's blocks go in consecutive slots (requests then read it as one run of rows), a prefix extended
// later continues after its last block where that slot is free, else in the first free run long enough; freed slots
// are reused; with every slot taken nothing more is stored, whatever the row limit.
TEST(PrefixCache, APrefixsBlocksTakeConsecutiveSlots) {
  PrefixCache cache(kBlock, 1, 8);
  auto slots_of = [&](const std::vector<int32_t>& t) {
    std::vector<int> slots;
    const auto chain = cache.chain(t.data(), int(t.size()));
    for (const PrefixCache::Block* b : cache.match(t.data(), int(t.size()), chain, false)) slots.push_back(b->slot);
    return slots;
  };
  store(cache, tokens(12, 100), 1);  // 3 blocks
  store(cache, tokens(8, 200), 2);   // 2 blocks
  EXPECT_EQ(slots_of(tokens(12, 100)), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(slots_of(tokens(8, 200)), (std::vector<int>{3, 4}));
  store(cache, tokens(20, 100), 1);  // the first prefix gains 2 blocks: slot 3 is taken, so the free run [5, 8)
  EXPECT_EQ(slots_of(tokens(20, 100)), (std::vector<int>{0, 1, 2, 5, 6}));
  cache.evict_to(20);  // the least recently used: the second prefix's blocks, slots 3 and 4 (last first)
  EXPECT_EQ(matched(cache, tokens(8, 200)), 0);
  store(cache, tokens(8, 300), 3);  // 2 blocks: the first free run of 2 is [3, 5)
  EXPECT_EQ(slots_of(tokens(8, 300)), (std::vector<int>{3, 4}));
  EXPECT_EQ(store(cache, tokens(12, 400), 4), 1);  // one slot left (7); the 8 slots are the limit
  EXPECT_EQ(cache.blocks(), 8);
  EXPECT_EQ(slots_of(tokens(4, 400)), (std::vector<int>{7}));
}

// Tails: a context's last partial block, stored when asked, under its last whole block. A query finds, after its
// whole blocks, the entry under the last one with the most leading tokens in common (a tail, or a whole block that
// diverges from it), never more than the query's own tokens; a tail is not announced to routers, needs drafter rows
// for a speculating query, and goes when a whole block that starts with its tokens arrives.
TEST(PrefixCache, TailsAndDivergingBlocksGiveTheirCommonLeadingRows) {
  PrefixCache cache(kBlock, 1, 64);
  auto tail_of = [&](const std::vector<int32_t>& t, int n, bool need_drafter = false) {
    const auto chain = cache.chain(t.data(), n);
    return cache.match_tail(t.data(), n, cache.match(t.data(), n, chain, need_drafter), need_drafter);
  };
  auto context = tokens(11);  // 2 whole blocks and a tail of 3
  EXPECT_EQ(store(cache, context, 1, 1 << 20, false, true), 3);
  cache.take_events();
  EXPECT_EQ(cache.blocks(), 2);
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.rows(), 3 * kBlock);  // a tail takes a slot
  auto next = tokens(11);
  next.push_back(7);
  next.push_back(8);
  PrefixCache::Tail t = tail_of(next, 12);
  ASSERT_NE(t.block, nullptr);
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(target_rows.at(t.block->slot), 3);  // only the tail's rows were written
  EXPECT_EQ(tail_of(next, 10).rows, 2);         // no more than the query has
  next[9] = 0;
  EXPECT_EQ(tail_of(next, 12).rows, 1);  // the common leading tokens
  EXPECT_EQ(tail_of(next, 12, true).rows, 0);  // no drafter rows
  EXPECT_EQ(tail_of(tokens(7), 7).rows, 3);       // a query shorter than block 1 takes its first rows
  EXPECT_EQ(tail_of(tokens(7, 300), 7).rows, 0);  // no whole block matched: entries under none are not searched
  // A whole block under the same parent that diverges mid-way gives its common rows too.
  auto other = tokens(12);
  other[10] = 0;  // block 2 = {108, 109, 0, 111}
  store(cache, other, 2);
  auto query = tokens(12);
  query[10] = 0;
  query[11] = 5;
  query.push_back(1);
  EXPECT_EQ(tail_of(query, 13).rows, 3);  // block 2 of `other`: 108, 109, 0
  // The next turn's whole block starting with the tail's tokens replaces the tail; no event named it.
  store(cache, tokens(16), 3);
  EXPECT_EQ(cache.blocks(), 5);  // 2 shared, other's block 2, the new blocks 2 and 3
  EXPECT_EQ(cache.entries(), 5);  // the tail went
  for (const KvCacheEvent& e : cache.take_events())
    if (e.kind == KvCacheEvent::Kind::BlockStored) EXPECT_EQ(e.token_ids.size() % kBlock, 0u);
    else EXPECT_EQ(e.kind, KvCacheEvent::Kind::BlockStored) << "a tail's removal was announced";
  EXPECT_EQ(tail_of(next, 12).rows, 1);  // now from the whole block 2 (108, then 0 != 110)
}

TEST(PrefixCache, AnOrphanedBlockNeverMatchesUnderANewParent) {
  PrefixCache cache(kBlock, 1, 64);
  const auto t = tokens(8);
  store(cache, t, 1);
  auto hit = cache.match(t.data(), 8, cache.chain(t.data(), 8), false);
  std::vector<const PrefixCache::Block*> second = {hit[1]};
  cache.acquire(second);
  cache.evict_to(4);  // the first block goes, the pinned second stays
  cache.release(second);
  EXPECT_EQ(cache.blocks(), 1);
  EXPECT_EQ(matched(cache, t), 0);
  // Storing the prefix again makes a new first block; the old second was computed under the old one and is not
  // trusted (the store stops there), so only the first matches.
  store(cache, t, 2);
  EXPECT_EQ(matched(cache, t), 1);
}

TEST(PrefixCache, EventsNameStoredAndRemovedBlocksInOrder) {
  PrefixCache cache(kBlock, 1, 64);
  const auto t = tokens(12);
  const auto names = cache.chain(t.data(), 12);
  store(cache, tokens(8), 1);
  store(cache, t, 1);  // adds the third block, parent the second
  store(cache, tokens(8, 500), 1);  // another prefix
  auto events = cache.take_events();
  ASSERT_EQ(events.size(), 2u);
  // Blocks that extend the previous event's chain join it (one event per prefix stored, as vLLM sends a request's).
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::BlockStored);
  EXPECT_EQ(events[0].block_hashes, names);
  EXPECT_FALSE(events[0].parent_block_hash.has_value());
  EXPECT_EQ(events[0].token_ids, t);
  EXPECT_EQ(events[0].block_size, kBlock);
  const auto other = tokens(8, 500);
  EXPECT_EQ(events[1].block_hashes, cache.chain(other.data(), 8));
  EXPECT_FALSE(events[1].parent_block_hash.has_value());
  EXPECT_EQ(events[1].token_ids, other);
  EXPECT_TRUE(cache.take_events().empty());
  // A block stored under a held parent names it.
  auto longer = tokens(16, 500);
  store(cache, longer, 1);
  events = cache.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].parent_block_hash, cache.chain(other.data(), 8)[1]);
  EXPECT_EQ(events[0].token_ids, std::vector<int32_t>(longer.begin() + 8, longer.end()));
  cache.evict_to(cache.rows() - 8);  // the first prefix is the least recently used: its last two blocks go
  events = cache.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::BlockRemoved);
  EXPECT_EQ(events[0].block_hashes, std::vector<uint64_t>({names[2], names[1]}));
  cache.clear();
  events = cache.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::AllBlocksCleared);
}

}  // namespace
}  // namespace ts
