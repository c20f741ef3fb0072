#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace ts {

KVCache::KVCache(int num_layers, int num_kv_heads, int head_dim, int max_tokens, DType dtype)
    : kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      max_tokens_(max_tokens),
      dtype_(dtype),
      keys_(num_layers),
      values_(num_layers) {
  TS_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && max_tokens > 0, "bad KV cache shape");
  TS_CHECK(dtype == DType::F32 || dtype == DType::BF16, "KV cache dtype must be F32 or BF16, got ",
           dtype_name(dtype));
  elem_bytes_ = int(dtype_size(dtype));
}

namespace {
constexpr int kTile = 16;  // keys per K tile
inline int round_up_to_tile(int rows) { return (rows + kTile - 1) / kTile * kTile; }
}  // namespace

void KVCache::reserve_rows(int rows) {
  if (rows <= capacity_) return;
  // Grow geometrically so appending token by token stays amortised O(1); whole K tiles. Head-major: each head's rows
  // (K: its tiles) move to their place in the bigger buffer.
  const int new_capacity = round_up_to_tile(std::min(max_tokens_, std::max(rows, std::max(64, capacity_ * 2))));
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_;  // one row of one head
  const size_t kept = size_t(round_up_to_tile(length_ + pending_)) * head_bytes;  // [rows in use, hd] per head
  for (auto* layers : {&keys_, &values_})
    for (auto& buffer : *layers) {
      Buffer grown(size_t(kv_heads_) * new_capacity * head_bytes);  // [kv_heads, new_capacity, hd], not zeroed
      for (int g = 0; g < kv_heads_ && kept > 0; ++g)
        std::memcpy(&grown[size_t(g) * new_capacity * head_bytes], &buffer[size_t(g) * capacity_ * head_bytes],
                    kept);
      buffer.swap(grown);
    }
  capacity_ = new_capacity;
  set_tiles_end_ = std::min(set_tiles_end_, round_up_to_tile(length_ + pending_));  // what was copied
}

void KVCache::clear_tile_tail(int end) {
  const int tile_end = round_up_to_tile(end);
  if (tile_end <= set_tiles_end_) return;
  // Rows [set_tiles_end_, end) are the ones the caller writes next; lanes [end, tile_end) of the last tile are not.
  if (end < tile_end) {
    const size_t eb = size_t(elem_bytes_), lanes = size_t(tile_end - end);
    for (auto& buffer : keys_)
      for (int g = 0; g < kv_heads_; ++g)
        for (int d = 0; d < head_dim_; ++d) std::memset(buffer.data() + key_index(g, end, d) * eb, 0, lanes * eb);
  }
  set_tiles_end_ = tile_end;
}

void KVCache::begin_append(int n) {
  TS_CHECK(n >= 0, "negative append");
  TS_CHECK(length_ + n <= max_tokens_, "context too long: ", length_, " cached + ", n, " new tokens exceeds the ",
           max_tokens_, "-token context limit");
  reserve_rows(length_ + n);
  clear_tile_tail(length_ + n);
  pending_ = n;
}

size_t KVCache::key_index(int g, int row, int d) const {
  return (size_t(g) * capacity_ + size_t(row & ~(kTile - 1))) * head_dim_ + size_t(d) * kTile + (row & (kTile - 1));
}

namespace {
// One element of a cache buffer of `dtype` (f32, or bf16 bits) at element index i.
inline void store_elem(uint8_t* buffer, size_t i, DType dtype, float x) {
  if (dtype == DType::F32)
    reinterpret_cast<float*>(buffer)[i] = x;
  else
    reinterpret_cast<uint16_t*>(buffer)[i] = f32_to_bf16(x);
}
inline float load_elem(const uint8_t* buffer, size_t i, DType dtype) {
  return dtype == DType::F32 ? reinterpret_cast<const float*>(buffer)[i]
                             : bf16_to_f32(reinterpret_cast<const uint16_t*>(buffer)[i]);
}
}  // namespace

void KVCache::write_pending(int layer, int first, int n, const float* k, const float* v) {
  TS_CHECK(layer >= 0 && layer < num_layers(), "KV write: layer ", layer, " out of range");
  TS_CHECK(first >= 0 && n >= 0 && first + n <= pending_, "KV write: rows [", first, ", ", first + n,
           ") outside the ", pending_, " pending rows");
  uint8_t* keys = keys_[layer].data();
  uint8_t* values = values_[layer].data();
  for (int r = 0; r < n; ++r) {
    const int row = length_ + first + r;
    for (int g = 0; g < kv_heads_; ++g) {
      const size_t from = size_t(r) * kv_dim() + size_t(g) * head_dim_;  // in k, v: [n, kv_heads, head_dim]
      const size_t v_at = (size_t(g) * capacity_ + size_t(row)) * head_dim_;
      for (int d = 0; d < head_dim_; ++d) {
        store_elem(keys, key_index(g, row, d), dtype_, k[from + d]);
        store_elem(values, v_at + d, dtype_, v[from + d]);
      }
    }
  }
}

KVRows KVCache::rows(int layer) const {
  return KVRows{keys_[layer].data(), values_[layer].data(), dtype_, int64_t(head_dim_),
                int64_t(capacity_) * head_dim_};
}

void KVCache::read_row(int layer, int row, float* k, float* v) const {
  TS_CHECK(layer >= 0 && layer < num_layers() && row >= 0 && row < length_ + pending_, "KV read: row ", row,
           " of layer ", layer, " out of range");
  for (int g = 0; g < kv_heads_; ++g) {
    const size_t v_at = (size_t(g) * capacity_ + size_t(row)) * head_dim_;
    for (int d = 0; d < head_dim_; ++d) {
      k[size_t(g) * head_dim_ + d] = load_elem(keys_[layer].data(), key_index(g, row, d), dtype_);
      v[size_t(g) * head_dim_ + d] = load_elem(values_[layer].data(), v_at + d, dtype_);
    }
  }
}

namespace {
// Key rows [first, first + n) of one head between its tiles (head: [capacity / 16][head_dim][16]) and a block's keys
// [head_dim][n] (kToBlock: tiles -> block; bits unchanged). A tile's row d holds the rows' element d side by side, so
// keys move in runs of up to 16 elements per dimension, and a 16-row block on a tile is one copy.
template <bool kToBlock, typename TileT, typename BlockT>
void copy_key_rows(TileT* head, BlockT* block, int first, int n, int head_dim) {
  using T = std::remove_const_t<TileT>;
  for (int r = first; r < first + n;) {
    const int lane = r & (kTile - 1), run = std::min(kTile - lane, first + n - r);
    TileT* tile = head + size_t(r - lane) * head_dim + lane;  // [head_dim][16] from lane `lane`
    BlockT* rows = block + (r - first);                       // [head_dim][n] from row r
    auto copy = [&](size_t tile_at, size_t rows_at, size_t count) {
      if constexpr (kToBlock)
        std::memcpy(rows + rows_at, tile + tile_at, count * sizeof(T));
      else
        std::memcpy(tile + tile_at, rows + rows_at, count * sizeof(T));
    };
    if (run == kTile && n == kTile)
      copy(0, 0, size_t(kTile) * head_dim);
    else if (run == kTile)  // a constant count: each copy inlined
      for (int d = 0; d < head_dim; ++d) copy(size_t(d) * kTile, size_t(d) * n, kTile);
    else
      for (int d = 0; d < head_dim; ++d) copy(size_t(d) * kTile, size_t(d) * n, size_t(run));
    r += run;
  }
}
}  // namespace

void KVCache::export_rows(int first, int n, uint8_t* out) const {
  TS_CHECK(first >= 0 && n >= 0 && first + n <= length_, "KV export: rows [", first, ", ", first + n,
           ") outside the ", length_, " committed rows");
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_, run = size_t(n) * head_bytes;  // one head's rows
  for (int l = 0; l < num_layers(); ++l) {
    for (int g = 0; g < kv_heads_; ++g, out += run) {
      const uint8_t* head = keys_[l].data() + size_t(g) * capacity_ * head_bytes;
      if (dtype_ == DType::F32)
        copy_key_rows<true>(reinterpret_cast<const float*>(head), reinterpret_cast<float*>(out), first, n, head_dim_);
      else
        copy_key_rows<true>(reinterpret_cast<const uint16_t*>(head), reinterpret_cast<uint16_t*>(out), first, n,
                            head_dim_);
    }
    for (int g = 0; g < kv_heads_; ++g, out += run)
      std::memcpy(out, values_[l].data() + (size_t(g) * capacity_ + first) * head_bytes, run);
  }
}

void KVCache::import_rows(int n, const uint8_t* in) {
  TS_CHECK(pending_ == 0, "KV import with pending rows");
  TS_CHECK(n >= 0 && length_ + n <= max_tokens_, "KV import: ", length_, " cached + ", n,
           " rows exceeds the cache's ", max_tokens_, " rows");
  reserve_rows(length_ + n);
  clear_tile_tail(length_ + n);
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_, run = size_t(n) * head_bytes;
  for (int l = 0; l < num_layers(); ++l) {
    for (int g = 0; g < kv_heads_; ++g, in += run) {
      uint8_t* head = keys_[l].data() + size_t(g) * capacity_ * head_bytes;
      if (dtype_ == DType::F32)
        copy_key_rows<false>(reinterpret_cast<float*>(head), reinterpret_cast<const float*>(in), length_, n, head_dim_);
      else
        copy_key_rows<false>(reinterpret_cast<uint16_t*>(head), reinterpret_cast<const uint16_t*>(in), length_, n,
                             head_dim_);
    }
    for (int g = 0; g < kv_heads_; ++g, in += run)
      std::memcpy(values_[l].data() + (size_t(g) * capacity_ + length_) * head_bytes, in, run);
  }
  length_ += n;
}

namespace {
// Lane src_lane of a key tile's rows to lane dst_lane of another's (or the same one's).  tiles: [head_dim][16]
template <typename T>
void move_key_lane(const uint8_t* src_tile, int src_lane, uint8_t* dst_tile, int dst_lane, int head_dim) {
  const T* from = reinterpret_cast<const T*>(src_tile) + src_lane;
  T* to = reinterpret_cast<T*>(dst_tile) + dst_lane;
  for (int d = 0; d < head_dim; ++d) to[size_t(d) * kTile] = from[size_t(d) * kTile];
}
}  // namespace

void KVCache::move_row(int src, int dst) {
  const size_t eb = size_t(elem_bytes_), head_bytes = size_t(head_dim_) * eb;
  for (int l = 0; l < num_layers(); ++l)
    for (int g = 0; g < kv_heads_; ++g) {
      uint8_t* src_tile = keys_[l].data() + key_index(g, src & ~(kTile - 1), 0) * eb;
      uint8_t* dst_tile = keys_[l].data() + key_index(g, dst & ~(kTile - 1), 0) * eb;
      if (dtype_ == DType::F32)
        move_key_lane<float>(src_tile, src & (kTile - 1), dst_tile, dst & (kTile - 1), head_dim_);
      else
        move_key_lane<uint16_t>(src_tile, src & (kTile - 1), dst_tile, dst & (kTile - 1), head_dim_);
      uint8_t* head = values_[l].data() + size_t(g) * capacity_ * head_bytes;  // [capacity, head_dim]
      std::memmove(head + size_t(dst) * head_bytes, head + size_t(src) * head_bytes, head_bytes);
    }
}

void KVCache::commit(const std::vector<int32_t>& keep) {
  int dst = length_;
  int last = -1;
  for (int32_t src_index : keep) {
    TS_CHECK(src_index > last && src_index < pending_, "commit: keep indices must increase and be < ", pending_);
    last = src_index;
    const int src = length_ + src_index;
    if (src != dst) move_row(src, dst);
    ++dst;
  }
  length_ = dst;
  pending_ = 0;
}

void KVCache::commit_all() {
  length_ += pending_;
  pending_ = 0;
}

void KVCache::truncate(int new_length) {
  TS_CHECK(new_length >= 0 && new_length <= length_, "truncate: bad length ", new_length);
  length_ = new_length;
  pending_ = 0;
}

}  // namespace ts
