// What the engine's prefix cache tells prefix-aware routers: blocks of KV rows it stored, blocks it removed, and that
// it dropped everything. The fields are vLLM's KV-cache events (vllm/distributed/kv_events.py: BlockStored,
// BlockRemoved, AllBlocksCleared); server/kv_events.h publishes them over ZeroMQ in vLLM's msgpack encoding.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ts {

struct KvCacheEvent {
  enum class Kind : uint8_t { BlockStored, BlockRemoved, AllBlocksCleared };
  Kind kind = Kind::BlockStored;
  // BlockStored: the stored blocks in prefix order, each the hash chain of its tokens (engine/prefix_cache.h);
  // BlockRemoved: the removed blocks; AllBlocksCleared: empty.
  std::vector<uint64_t> block_hashes;
  // BlockStored: the hash of the block before the first stored one; none when the first is a prompt's first block.
  std::optional<uint64_t> parent_block_hash;
  std::vector<int32_t> token_ids;  // BlockStored: [block_hashes.size() * block_size] the blocks' tokens, in order
  int block_size = 0;              // BlockStored: tokens per block
};

}  // namespace ts
