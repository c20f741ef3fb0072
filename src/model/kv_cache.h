// Per-sequence key/value cache of one model (all layers).
//
// Rows [0, length) are committed. A forward appends its rows of this sequence as pending rows
// [length, length + pending); commit(keep) then keeps a chosen subset of the pending rows (the accepted path of a
// draft tree), compacted right after the committed ones, and drops the rest. Memory never grows with rejected
// nodes: capacity grows only with committed length plus the largest batch.
#pragma once

#include <cstdint>
#include <vector>

namespace ts {

class KVCache {
 public:
  KVCache() = default;
  // kv_dim = num_kv_heads * head_dim; max_tokens bounds committed + pending rows.
  KVCache(int num_layers, int kv_dim, int max_tokens);

  int length() const { return length_; }
  int pending() const { return pending_; }
  int max_tokens() const { return max_tokens_; }
  int kv_dim() const { return kv_dim_; }
  int num_layers() const { return int(keys_.size()); }

  // Reserves n pending rows after the committed ones (dropping any earlier pending rows).
  // Throws ts::Error when length + n > max_tokens.
  void begin_append(int n);
  // Rows [0, length + pending) of one layer.  [rows, kv_dim]
  float* keys(int layer) { return keys_[layer].data(); }
  float* values(int layer) { return values_[layer].data(); }
  const float* keys(int layer) const { return keys_[layer].data(); }
  const float* values(int layer) const { return values_[layer].data(); }

  // Keeps pending rows `keep` (strictly increasing indices into the pending rows) and drops the others.
  void commit(const std::vector<int32_t>& keep);
  void commit_all();
  void drop_pending() { pending_ = 0; }
  // Forgets committed rows from new_length on.
  void truncate(int new_length);

 private:
  void reserve_rows(int rows);
  int kv_dim_ = 0;
  int max_tokens_ = 0;
  int capacity_ = 0;  // rows allocated per layer
  int length_ = 0;
  int pending_ = 0;
  std::vector<std::vector<float>> keys_;    // [num_layers][capacity, kv_dim]
  std::vector<std::vector<float>> values_;  // [num_layers][capacity, kv_dim]
};

}  // namespace ts
