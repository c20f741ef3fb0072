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
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace ts {

// One layer's rows as the attention kernel reads them (kernels::attention_tiled). Head-major, so each head's rows
// are contiguous and attention streams them: values [kv_heads, capacity, head_dim]; keys in tiles of 16 rows,
// [kv_heads, capacity / 16, head_dim, 16] (keys in vector lanes: the kernel scores 16 keys per FMA without
// transposing them). capacity is a multiple of 16.
struct KVRows {
  const void* k = nullptr;  // [kv_heads, capacity / 16, head_dim, 16] of dtype
  const void* v = nullptr;  // [kv_heads, capacity, head_dim] of dtype
  DType dtype = DType::F32;
  int64_t row_stride = 0;   // elements between value rows j and j + 1 of a head (head_dim)
  int64_t head_stride = 0;  // elements between heads g and g + 1, keys and values (capacity * head_dim)
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
  // Rows [0, length + pending) of one layer.
  KVRows rows(int layer) const;
  // Row `row` of one layer widened to f32 (tests, tools).  k, v: [kv_dim]
  void read_row(int layer, int row, float* k, float* v) const;

  // Committed rows [first, first + n) of every layer as one byte run, bits unchanged (the prefix cache's block
  // layout): per layer, each head's keys [head_dim, n] (as the tiles hold them), then each head's values
  // [n, head_dim]:  out: [num_layers, 2 (keys, values), kv_heads, n * head_dim] of dtype = n * bytes_per_row() bytes.
  void export_rows(int first, int n, uint8_t* out) const;
  // Allocates room for `rows` rows (committed + pending) at once, so a run of appends does not regrow the buffers.
  void reserve(int rows) { reserve_rows(std::min(rows, max_tokens_)); }
  // Appends n committed rows from export_rows' layout (the cache must have no pending rows). Throws ts::Error when
  // length + n > max_tokens.
  void import_rows(int n, const uint8_t* in);

  // Keeps pending rows `keep` (strictly increasing indices into the pending rows) and drops the others.
  void commit(const std::vector<int32_t>& keep);
  void commit_all();
  void drop_pending() { pending_ = 0; }
  // Forgets committed rows from new_length on.
  void truncate(int new_length);

 private:
  void reserve_rows(int rows);
  // Moves row src to row dst (every layer, head, keys and values).
  void move_row(int src, int dst);
  // Before rows up to `end` are written: sets the key lanes of rows [end, end rounded up to 16) in every layer and
  // head to zero, once per tile. Attention reads whole tiles (lanes past the last row are computed and dropped), so
  // no lane it reads is left unset although buffers are not zeroed.
  void clear_tile_tail(int end);
  // Element index of key row `row`, dimension d of head g in a layer's key buffer (its tile's lane).
  size_t key_index(int g, int row, int d) const;
  int kv_heads_ = 0;
  int head_dim_ = 0;
  int max_tokens_ = 0;
  int capacity_ = 0;  // rows allocated per layer, a multiple of 16
  int set_tiles_end_ = 0;  // key tiles [0, set_tiles_end_ / 16) hold no unset lane; a multiple of 16
  int length_ = 0;
  int pending_ = 0;
  DType dtype_ = DType::F32;
  int elem_bytes_ = 4;
  using Buffer = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;
  std::vector<Buffer> keys_;    // [num_layers][kv_heads, capacity / 16, head_dim, 16] of dtype
  std::vector<Buffer> values_;  // [num_layers][kv_heads, capacity, head_dim] of dtype
};

}  // namespace ts
