// A run of one layer's key/value rows in the layout attention_tiled reads (kernels/ops.h). A sequence's rows may sit
// in several runs: blocks of a prefix shared read-only with other sequences, then the sequence's own rows.
#pragma once

#include <cstdint>

namespace ts::kernels {

// Rows [first_row, the next span's first_row (or n_kv for the last span)) of every KV head, f32 or bf16 bits (the
// call says which). For KV head g, key row first_row + r's element d at
//   k + g * head_stride + (r >> 4) * 16 * head_dim + d * 16 + (r & 15)   (tiles of 16 keys, keys in lanes)
// and value row first_row + r at v + g * head_stride + r * head_dim. first_row is a multiple of 16 (whole tiles),
// and K must be readable up to the span's rows rounded up to 16 (those lanes are computed and dropped).
struct KVSpan {
  const void* k = nullptr;  // [kv_heads][head_stride] of which [rows / 16 (rounded up)][head_dim][16] used
  const void* v = nullptr;  // [kv_heads][head_stride] of which [rows][head_dim] used
  int64_t head_stride = 0;  // elements between KV heads g and g + 1, keys and values
  int first_row = 0;
};

// Called by attention_tiled once per KV head, before any of that head's rows are read, on the thread that then reads
// them: a KV cache writes a forward's new rows there, so they are written and read on one core, and with one task
// per head (calls whose query rows fit one task: up to 16 on AVX-512, 8 on AVX2) the same heads stay on the same
// threads from layer to layer and step to step. nullptr: no hook.
struct KVHeadHook {
  void (*fn)(const void* ctx, int kv_head) = nullptr;
  const void* ctx = nullptr;
  void operator()(int kv_head) const { fn(ctx, kv_head); }
};

// The span holding row `row` of spans[0, n_spans) (increasing first_row, the first at 0; row >= 0).
inline const KVSpan& span_holding(const KVSpan* spans, int n_spans, int row) {
  int s = n_spans - 1;
  while (s > 0 && spans[s].first_row > row) --s;
  return spans[s];
}

}  // namespace ts::kernels
