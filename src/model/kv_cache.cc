#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

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

void KVCache::reserve_rows(int rows) {
  if (rows <= capacity_) return;
  // Grow geometrically so appending token by token stays amortised O(1). Head-major: each head's rows move to
  // their place in the bigger buffer.
  const int new_capacity = std::min(max_tokens_, std::max(rows, std::max(64, capacity_ * 2)));
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_;  // one row of one head
  const size_t kept = size_t(length_ + pending_) * head_bytes;  // [rows in use, head_dim] per head
  for (auto* layers : {&keys_, &values_})
    for (auto& buffer : *layers) {
      std::vector<uint8_t> grown(size_t(kv_heads_) * new_capacity * head_bytes);  // [kv_heads, new_capacity, hd]
      for (int g = 0; g < kv_heads_ && kept > 0; ++g)
        std::memcpy(&grown[size_t(g) * new_capacity * head_bytes], &buffer[size_t(g) * capacity_ * head_bytes],
                    kept);
      buffer.swap(grown);
    }
  capacity_ = new_capacity;
}

void KVCache::begin_append(int n) {
  TS_CHECK(n >= 0, "negative append");
  TS_CHECK(length_ + n <= max_tokens_, "context too long: ", length_, " cached + ", n, " new tokens exceeds the ",
           max_tokens_, "-token context limit");
  reserve_rows(length_ + n);
  pending_ = n;
}

namespace {
void store_row_elems(const float* src, size_t n, DType dtype, uint8_t* dst) {
  if (dtype == DType::F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);  // [n]
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
}
void load_row_elems(const uint8_t* src, size_t n, DType dtype, float* dst) {
  if (dtype == DType::F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);  // [n]
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(in[i]);
}
}  // namespace

void KVCache::write_pending(int layer, int first, int n, const float* k, const float* v) {
  TS_CHECK(layer >= 0 && layer < num_layers(), "KV write: layer ", layer, " out of range");
  TS_CHECK(first >= 0 && n >= 0 && first + n <= pending_, "KV write: rows [", first, ", ", first + n,
           ") outside the ", pending_, " pending rows");
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_;
  for (int r = 0; r < n; ++r)
    for (int g = 0; g < kv_heads_; ++g) {
      const size_t at = (size_t(g) * capacity_ + size_t(length_ + first + r)) * head_bytes;
      const size_t from = size_t(r) * kv_dim() + size_t(g) * head_dim_;  // in k, v: [n, kv_heads, head_dim]
      store_row_elems(k + from, head_dim_, dtype_, keys_[layer].data() + at);
      store_row_elems(v + from, head_dim_, dtype_, values_[layer].data() + at);
    }
}

KVRows KVCache::rows(int layer) const {
  return KVRows{keys_[layer].data(), values_[layer].data(), dtype_, int64_t(head_dim_),
                int64_t(capacity_) * head_dim_};
}

void KVCache::read_row(int layer, int row, float* k, float* v) const {
  TS_CHECK(layer >= 0 && layer < num_layers() && row >= 0 && row < length_ + pending_, "KV read: row ", row,
           " of layer ", layer, " out of range");
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_;
  for (int g = 0; g < kv_heads_; ++g) {
    const size_t at = (size_t(g) * capacity_ + size_t(row)) * head_bytes;
    load_row_elems(keys_[layer].data() + at, head_dim_, dtype_, k + size_t(g) * head_dim_);
    load_row_elems(values_[layer].data() + at, head_dim_, dtype_, v + size_t(g) * head_dim_);
  }
}

void KVCache::export_rows(int first, int n, uint8_t* out) const {
  TS_CHECK(first >= 0 && n >= 0 && first + n <= length_, "KV export: rows [", first, ", ", first + n,
           ") outside the ", length_, " committed rows");
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_, run = size_t(n) * head_bytes;  // one head's rows
  for (int l = 0; l < num_layers(); ++l)
    for (const auto* layers : {&keys_, &values_})
      for (int g = 0; g < kv_heads_; ++g, out += run)
        std::memcpy(out, (*layers)[l].data() + (size_t(g) * capacity_ + first) * head_bytes, run);
}

void KVCache::import_rows(int n, const uint8_t* in) {
  TS_CHECK(pending_ == 0, "KV import with pending rows");
  TS_CHECK(n >= 0 && length_ + n <= max_tokens_, "KV import: ", length_, " cached + ", n,
           " rows exceeds the cache's ", max_tokens_, " rows");
  reserve_rows(length_ + n);
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_, run = size_t(n) * head_bytes;
  for (int l = 0; l < num_layers(); ++l)
    for (auto* layers : {&keys_, &values_})
      for (int g = 0; g < kv_heads_; ++g, in += run)
        std::memcpy((*layers)[l].data() + (size_t(g) * capacity_ + length_) * head_bytes, in, run);
  length_ += n;
}

void KVCache::move_row(int src, int dst) {
  const size_t head_bytes = size_t(head_dim_) * elem_bytes_;
  for (auto* layers : {&keys_, &values_})
    for (auto& buffer : *layers)
      for (int g = 0; g < kv_heads_; ++g) {
        uint8_t* head = buffer.data() + size_t(g) * capacity_ * head_bytes;  // [capacity, head_dim]
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
