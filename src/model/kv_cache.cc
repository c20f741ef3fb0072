#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"

namespace ts {

KVCache::KVCache(int num_layers, int num_kv_heads, int head_dim, int max_tokens, DType dtype)
    : kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      max_tokens_(max_tokens),
      dtype_(dtype),
      keys_(num_layers),
      values_(num_layers),
      spans_(num_layers, std::vector<kernels::KVSpan>(1)) {
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
  const int own = rows - shared_rows_;
  if (own <= capacity_) return;
  // Grow geometrically so appending token by token stays amortised O(1); whole K tiles. Head-major: each head's rows
  // (K: its tiles) move to their place in the bigger buffer.
  const int new_capacity =
      round_up_to_tile(std::min(max_tokens_ - shared_rows_, std::max(own, std::max(64, capacity_ * 2))));
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_;  // one row of one head
  const int in_use = length_ + pending_ - shared_rows_;       // own rows
  const size_t kept = size_t(round_up_to_tile(in_use)) * head_bytes;  // [rows in use, hd] per head
  for (auto* layers : {&keys_, &values_})
    for (auto& buffer : *layers) {
      Buffer grown(size_t(kv_heads_) * new_capacity * head_bytes);  // [kv_heads, new_capacity, hd], not zeroed
      for (int g = 0; g < kv_heads_ && kept > 0; ++g)
        std::memcpy(&grown[size_t(g) * new_capacity * head_bytes], &buffer[size_t(g) * capacity_ * head_bytes],
                    kept);
      buffer.swap(grown);
    }
  capacity_ = new_capacity;
  set_tiles_end_ = std::min(set_tiles_end_, round_up_to_tile(in_use));  // what was copied
}

void KVCache::clear_tile_tail(int end_row) {
  const int end = end_row - shared_rows_, tile_end = round_up_to_tile(end);  // own rows
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

size_t KVCache::key_index(int g, int own, int d) const {
  return (size_t(g) * capacity_ + size_t(own & ~(kTile - 1))) * head_dim_ + size_t(d) * kTile + (own & (kTile - 1));
}

namespace {
inline float load_elem(const uint8_t* buffer, size_t i, DType dtype) {
  return dtype == DType::F32 ? reinterpret_cast<const float*>(buffer)[i]
                             : bf16_to_f32(reinterpret_cast<const uint16_t*>(buffer)[i]);
}

// Heads [g0, g1) of K rows [n, kv_heads, head_dim] of element type T into a cache buffer's key tiles: key (own row
// `row0` + r, head g, dim d) at key_index(g, row0 + r, d). For one head and dimension, a tile's rows are neighbouring
// lanes.
template <typename T, typename KeyIndex>
void scatter_keys(const T* k, int n, int kv_heads, int head_dim, int row0, int g0, int g1, T* keys,
                  const KeyIndex& key_index) {
  const size_t kv_dim = size_t(kv_heads) * head_dim;
  for (int g = g0; g < g1; ++g)
    for (int r = 0; r < n;) {
      const int run = std::min(n - r, kTile - ((row0 + r) & (kTile - 1)));  // rows left in this tile
      for (int d = 0; d < head_dim; ++d) {
        T* lanes = keys + key_index(g, row0 + r, d);  // [run] neighbouring lanes
        const T* from = k + size_t(r) * kv_dim + size_t(g) * head_dim + d;
        for (int i = 0; i < run; ++i) lanes[i] = from[size_t(i) * kv_dim];
      }
      r += run;
    }
}
}  // namespace

void KVCache::write_pending(int layer, int first, int n, const float* k, const float* v) {
  write_pending_heads(layer, first, n, k, v, 0, kv_heads_);
}

void KVCache::write_pending_heads(int layer, int first, int n, const float* k, const float* v, int g0, int g1) {
  TS_CHECK(layer >= 0 && layer < num_layers(), "KV write: layer ", layer, " out of range");
  TS_CHECK(0 <= g0 && g0 <= g1 && g1 <= kv_heads_, "KV write: heads [", g0, ", ", g1, ") of ", kv_heads_);
  TS_CHECK(first >= 0 && n >= 0 && first + n <= pending_, "KV write: rows [", first, ", ", first + n,
           ") outside the ", pending_, " pending rows");
  if (n == 0) return;
  const int row0 = length_ + first - shared_rows_;  // own row of k[0]
  const size_t kv = size_t(kv_dim()), hd = size_t(head_dim_);
  auto key_at = [this](int g, int own, int d) { return key_index(g, own, d); };
  if (dtype_ == DType::F32) {
    float* values = reinterpret_cast<float*>(values_[layer].data());
    for (int r = 0; r < n; ++r)
      for (int g = g0; g < g1; ++g)
        std::memcpy(values + (size_t(g) * capacity_ + size_t(row0 + r)) * hd, v + size_t(r) * kv + size_t(g) * hd,
                    sizeof(float) * hd);
    scatter_keys(k, n, kv_heads_, head_dim_, row0, g0, g1, reinterpret_cast<float*>(keys_[layer].data()), key_at);
    return;
  }
  // bf16: rounded by the vector kernel (kernels::to_bf16_bits, f32_to_bf16's bits), values straight into their rows,
  // keys into a buffer first, then into their tiles' lanes.
  uint16_t* values = reinterpret_cast<uint16_t*>(values_[layer].data());
  for (int r = 0; r < n; ++r)
    for (int g = g0; g < g1; ++g)
      kernels::to_bf16_bits(v + size_t(r) * kv + size_t(g) * hd, int64_t(hd),
                            values + (size_t(g) * capacity_ + size_t(row0 + r)) * hd);
  thread_local std::vector<uint16_t> k_bf16;  // [n, kv_heads, head_dim] the key rows rounded (heads [g0, g1) set)
  k_bf16.resize(size_t(n) * kv);
  for (int r = 0; r < n; ++r)
    kernels::to_bf16_bits(k + size_t(r) * kv + size_t(g0) * hd, int64_t(g1 - g0) * int64_t(hd),
                          k_bf16.data() + size_t(r) * kv + size_t(g0) * hd);
  scatter_keys(k_bf16.data(), n, kv_heads_, head_dim_, row0, g0, g1, reinterpret_cast<uint16_t*>(keys_[layer].data()),
               key_at);
}

KVRows KVCache::rows(int layer) const {
  std::vector<kernels::KVSpan>& spans = spans_[layer];
  spans.back() = kernels::KVSpan{keys_[layer].data(), values_[layer].data(), int64_t(capacity_) * head_dim_,
                                 shared_rows_};
  const bool own_rows = length_ + pending_ > shared_rows_;
  return KVRows{spans.data(), int(spans.size()) - (own_rows ? 0 : 1), dtype_};
}

void KVCache::read_row(int layer, int row, float* k, float* v) const {
  TS_CHECK(layer >= 0 && layer < num_layers() && row >= 0 && row < length_ + pending_, "KV read: row ", row,
           " of layer ", layer, " out of range");
  const KVRows kv = rows(layer);
  const kernels::KVSpan& span = kernels::span_holding(kv.spans, kv.n_spans, row);
  const int r = row - span.first_row;
  for (int g = 0; g < kv_heads_; ++g) {
    const size_t head = size_t(g) * span.head_stride;
    const size_t k_at = head + size_t(r & ~(kTile - 1)) * head_dim_ + (r & (kTile - 1));
    const size_t v_at = head + size_t(r) * head_dim_;
    for (int d = 0; d < head_dim_; ++d) {
      k[size_t(g) * head_dim_ + d] =
          load_elem(static_cast<const uint8_t*>(span.k), k_at + size_t(d) * kTile, dtype_);
      v[size_t(g) * head_dim_ + d] = load_elem(static_cast<const uint8_t*>(span.v), v_at + d, dtype_);
    }
  }
}

void KVCache::overwrite_rows(int first, int n, const KVCache& from, int from_first) {
  TS_CHECK(from.num_layers() == num_layers() && from.kv_heads_ == kv_heads_ && from.head_dim_ == head_dim_ &&
               from.dtype_ == dtype_, "KV overwrite: caches of different shapes");
  TS_CHECK(first >= shared_rows_ && n >= 0 && first + n <= length_ && from_first >= 0 && from_first + n <= from.length_,
           "KV overwrite: rows [", first, ", ", first + n, ") from [", from_first, ", ", from_first + n,
           ") outside the committed own rows");
  TS_CHECK((first - shared_rows_) % kTile == 0 && from_first % kTile == 0, "KV overwrite: rows [", first, ", ",
           first + n, ") from row ", from_first, " do not start key tiles of ", kTile, " rows");
  // Tile by tile from whichever span of `from` holds it: a tile's keys [head_dim][16] and its value rows are each one
  // run in both caches (a last partial tile: the keys' lanes of its rows, per dimension).
  const size_t eb = size_t(elem_bytes_), row_bytes = size_t(head_dim_) * eb;
  for (int l = 0; l < num_layers(); ++l) {
    const KVRows src = from.rows(l);
    for (int t = 0; t < n; t += kTile) {
      const int rows = std::min(kTile, n - t);
      const kernels::KVSpan& span = kernels::span_holding(src.spans, src.n_spans, from_first + t);
      const size_t at = size_t(from_first + t - span.first_row) * row_bytes;
      const size_t to = size_t(first + t - shared_rows_) * row_bytes;
      for (int g = 0; g < kv_heads_; ++g) {
        const size_t src_head = size_t(g) * span.head_stride * eb, dst_head = size_t(g) * capacity_ * row_bytes;
        const uint8_t* k_from = static_cast<const uint8_t*>(span.k) + src_head + at;
        uint8_t* k_to = keys_[l].data() + dst_head + to;
        if (rows == kTile)
          std::memcpy(k_to, k_from, kTile * row_bytes);
        else
          for (int d = 0; d < head_dim_; ++d)
            std::memcpy(k_to + size_t(d) * kTile * eb, k_from + size_t(d) * kTile * eb, rows * eb);
        std::memcpy(values_[l].data() + dst_head + to, static_cast<const uint8_t*>(span.v) + src_head + at,
                    rows * row_bytes);
      }
    }
  }
}

void KVCache::append_rows(const KVCache& from, int from_first, int n) {
  TS_CHECK(pending_ == 0, "KV append: pending rows");
  begin_append(n);
  commit_all();
  try {
    overwrite_rows(length_ - n, n, from, from_first);
  } catch (...) {
    length_ -= n;  // nothing appended
    throw;
  }
}

void KVCache::share_rows(const KVCache& pool, int first, int n) {
  TS_CHECK(pending_ == 0 && length_ == shared_rows_, "KV share: shared rows must come before the cache's own rows (",
           length_ - shared_rows_, " own, ", pending_, " pending)");
  TS_CHECK(pool.num_layers() == num_layers() && pool.kv_heads_ == kv_heads_ && pool.head_dim_ == head_dim_ &&
               pool.dtype_ == dtype_ && pool.shared_rows_ == 0, "KV share: a pool of another shape");
  TS_CHECK(n > 0 && n % kTile == 0 && first >= 0 && first % kTile == 0 && first + n <= pool.length_,
           "KV share: pool rows [", first, ", ", first + n, ") are not whole tiles of ", kTile, " committed rows");
  TS_CHECK(length_ + n <= max_tokens_, "KV share: ", length_, " cached + ", n, " rows exceeds the cache's ",
           max_tokens_, " rows");
  if (&pool != shared_pool_ || first != shared_pool_end_) {  // a new run: a span of its own
    const size_t at = size_t(first) * head_dim_ * elem_bytes_;
    for (int l = 0; l < num_layers(); ++l)
      spans_[l].insert(spans_[l].end() - 1,
                       kernels::KVSpan{pool.keys_[l].data() + at, pool.values_[l].data() + at,
                                       int64_t(pool.capacity_) * head_dim_, shared_rows_});
  }
  shared_pool_ = &pool;
  shared_pool_end_ = first + n;
  shared_rows_ += n;
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

void KVCache::move_row(int src_row, int dst_row) {
  const int src = src_row - shared_rows_, dst = dst_row - shared_rows_;  // own rows
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
  TS_CHECK(new_length >= shared_rows_ && new_length <= length_, "truncate: bad length ", new_length, " (",
           shared_rows_, " shared rows, ", length_, " committed)");
  length_ = new_length;
  pending_ = 0;
}

}  // namespace ts
