// Per-sequence key/value cache of one model (all layers).
//
// Rows [0, length) are committed. A forward appends its rows of this sequence as pending rows
// [length, length + pending); commit(keep) then keeps a chosen subset of the pending rows (the accepted path of a
// draft tree), compacted right after the committed ones, and drops the rest. Memory never grows with rejected
// nodes: capacity grows only with committed length plus the largest batch.
//
// Rows are stored as f32 or bf16 (dtype()). A bf16 cache halves the memory and the attention's reads; rows are
// rounded to nearest-even once, when written, so every later read of a row sees the same values whatever batch
// it is read from (batch invariance and greedy identity hold as with f32).
//
// A cache may start with shared rows: runs of another cache's committed rows (the engine's prefix-cache pool) that
// other caches read too, read in place and never written (share_rows). The cache's own rows follow them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/kv_span.h"

namespace ts {

// One layer's rows as the attention kernel reads them (kernels::attention_tiled): one span per shared run, then one
// for the cache's own rows. Each is head-major, so each head's rows are contiguous and attention streams them:
// values [kv_heads, capacity, head_dim]; keys in tiles of 16 rows, [kv_heads, capacity / 16, head_dim, 16] (keys in
// vector lanes: the kernel scores 16 keys per FMA without transposing them). capacity is a multiple of 16 (for a
// shared run, the pool's).
struct KVRows {
  const kernels::KVSpan* spans = nullptr;  // [n_spans]
  int n_spans = 0;
  DType dtype = DType::F32;
};

// Allocates without zeroing: a cache's rows are written before they are read, and leaving the bytes alone spares the
// pages of rows a request never reaches (a new cache reserves its whole prompt and more at admission).
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: left as it is
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

class KVCache {
 public:
  KVCache() = default;
  // max_tokens bounds committed + pending rows. dtype: F32 or BF16.
  KVCache(int num_layers, int num_kv_heads, int head_dim, int max_tokens, DType dtype = DType::F32);

  int length() const { return length_; }
  int shared_rows() const { return shared_rows_; }  // rows [0, shared_rows) read in place from a pool
  int pending() const { return pending_; }
  int max_tokens() const { return max_tokens_; }
  int kv_dim() const { return kv_heads_ * head_dim_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int num_layers() const { return int(keys_.size()); }
  DType dtype() const { return dtype_; }
  // Bytes one row takes over all layers, keys and values.
  int64_t bytes_per_row() const { return int64_t(num_layers()) * kv_dim() * 2 * int64_t(elem_bytes_); }
  static int64_t bytes_per_row(int num_layers, int kv_dim, DType dtype) {
    return int64_t(num_layers) * kv_dim * 2 * int64_t(dtype_size(dtype));
  }

  // Reserves n pending rows after the committed ones (dropping any earlier pending rows).
  // Throws ts::Error when length + n > max_tokens.
  void begin_append(int n);
  // Writes pending rows [first, first + n) of one layer, rounded to the cache's dtype.  k, v: [n, kv_dim]
  void write_pending(int layer, int first, int n, const float* k, const float* v);
  // The same for KV heads [g0, g1) only (k, v still whole rows); the same bits. Calls for disjoint heads may run on
  // different threads at once.
  void write_pending_heads(int layer, int first, int n, const float* k, const float* v, int g0, int g1);
  // Rows [0, length + pending) of one layer.
  KVRows rows(int layer) const;
  // Row `row` of one layer widened to f32 (tests, tools).  k, v: [kv_dim]
  void read_row(int layer, int row, float* k, float* v) const;

  // Allocates room for `rows` rows (committed + pending) at once, so a run of appends does not regrow the buffers.
  void reserve(int rows) { reserve_rows(std::min(rows, max_tokens_)); }
  // Writes committed own rows [first, first + n) with rows [from_first, from_first + n) of `from` (committed, shared
  // or own), bits unchanged: the prefix cache's pool takes a request's rows so. first and from_first start key tiles
  // (own rows first - shared_rows() and from_first are multiples of 16); the other lanes of the last tile are left
  // as they are. Both caches have the same shape and dtype.
  void overwrite_rows(int first, int n, const KVCache& from, int from_first);
  // Appends n committed own rows copied from rows [from_first, from_first + n) of `from` (overwrite_rows' rules: the
  // cache's own rows so far fill whole tiles). Throws ts::Error when length + n > max_tokens.
  void append_rows(const KVCache& from, int from_first, int n);
  // Appends n committed rows that stay in `pool` (its committed own rows [first, first + n)), read in place: the
  // caller keeps them unchanged, and the pool's buffers in place (it never grows), while this cache (or a move of
  // it) exists. Only before the cache's own rows: length() == shared_rows() and no pending rows. first and n are
  // multiples of 16. Rows that continue the previous shared run of the same pool extend it (one span). Throws
  // ts::Error otherwise, or when length + n > max_tokens.
  void share_rows(const KVCache& pool, int first, int n);

  // Keeps pending rows `keep` (strictly increasing indices into the pending rows) and drops the others.
  void commit(const std::vector<int32_t>& keep);
  void commit_all();
  void drop_pending() { pending_ = 0; }
  // Forgets committed rows from new_length on (not below shared_rows()).
  void truncate(int new_length);

 private:
  void reserve_rows(int rows);
  // Moves row src to row dst (every layer, head, keys and values).
  void move_row(int src, int dst);
  // Before rows up to `end` are written: sets the key lanes of rows [end, end rounded up to 16) in every layer and
  // head to zero, once per tile. Attention reads whole tiles (lanes past the last row are computed and dropped), so
  // no lane it reads is left unset although buffers are not zeroed.
  void clear_tile_tail(int end);
  // Element index of own row `own` (row shared_rows + own), dimension d of head g in a layer's key buffer (its
  // tile's lane).
  size_t key_index(int g, int own, int d) const;
  int kv_heads_ = 0;
  int head_dim_ = 0;
  int max_tokens_ = 0;
  int capacity_ = 0;  // own rows allocated per layer, a multiple of 16
  int set_tiles_end_ = 0;  // own key tiles [0, set_tiles_end_ / 16) hold no unset lane; a multiple of 16
  int shared_rows_ = 0;    // rows in shared runs, a multiple of 16
  const KVCache* shared_pool_ = nullptr;  // the pool of the last shared run, and the pool row after it
  int shared_pool_end_ = -1;
  int length_ = 0;
  int pending_ = 0;
  DType dtype_ = DType::F32;
  int elem_bytes_ = 4;
  using Buffer = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;
  std::vector<Buffer> keys_;    // [num_layers][kv_heads, capacity / 16, head_dim, 16] of dtype
  std::vector<Buffer> values_;  // [num_layers][kv_heads, capacity, head_dim] of dtype
  // [num_layers][shared runs + 1 (own rows)]; the last entry is set by rows() (buffers move when they grow).
  mutable std::vector<std::vector<kernels::KVSpan>> spans_;
};

}  // namespace ts
