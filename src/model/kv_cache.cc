#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace ts {

KVCache::KVCache(int num_layers, int kv_dim, int max_tokens)
    : kv_dim_(kv_dim), max_tokens_(max_tokens), keys_(num_layers), values_(num_layers) {
  TS_CHECK(num_layers > 0 && kv_dim > 0 && max_tokens > 0, "bad KV cache shape");
}

void KVCache::reserve_rows(int rows) {
  if (rows <= capacity_) return;
  // Grow geometrically so appending token by token stays amortised O(1).
  int new_capacity = std::min(max_tokens_, std::max(rows, std::max(64, capacity_ * 2)));
  for (size_t l = 0; l < keys_.size(); ++l) {
    keys_[l].resize(size_t(new_capacity) * kv_dim_);
    values_[l].resize(size_t(new_capacity) * kv_dim_);
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

void KVCache::commit(const std::vector<int32_t>& keep) {
  int dst = length_;
  int last = -1;
  for (int32_t src_index : keep) {
    TS_CHECK(src_index > last && src_index < pending_, "commit: keep indices must increase and be < ", pending_);
    last = src_index;
    const int src = length_ + src_index;
    if (src != dst) {
      for (size_t l = 0; l < keys_.size(); ++l) {
        std::memmove(&keys_[l][size_t(dst) * kv_dim_], &keys_[l][size_t(src) * kv_dim_], sizeof(float) * kv_dim_);
        std::memmove(&values_[l][size_t(dst) * kv_dim_], &values_[l][size_t(src) * kv_dim_], sizeof(float) * kv_dim_);
      }
    }
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
