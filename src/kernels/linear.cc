// Linear: converts the checkpoint's weights once to the compute type and packs them in the layout every variant's
// GEMM reads; per call, the active variant's table entry rounds the activations to bf16 (bf16 compute) and runs
// the product (kernel_table.cc).
#include "kernels/linear.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/ops.h"
#include "kernels/weight_memory.h"

namespace ts::kernels {

namespace {

// Element i of a weight of `dtype` as f32 / as bf16 bits.
float weight_f32(const void* weight, DType dtype, size_t i) {
  if (dtype == DType::F32) return static_cast<const float*>(weight)[i];
  const uint16_t h = static_cast<const uint16_t*>(weight)[i];
  return dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
uint16_t weight_bf16(const void* weight, DType dtype, size_t i) {
  if (dtype == DType::BF16) return static_cast<const uint16_t*>(weight)[i];
  return f32_to_bf16(weight_f32(weight, dtype, i));
}

// weight [out, in] of `dtype` -> T (f32, or bf16 bits), row-major [out, in]. Uninitialised, then converted on the
// kernels' threads for big matrices: a zero-filled buffer and one thread would double a multi-GB load's time.
template <typename T, typename Convert>
std::unique_ptr<T[]> converted_weights(size_t n, const Convert& convert) {
  std::unique_ptr<T[]> out(new T[n]);
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
  cpu::parallel_ranges(chunks, n >= (size_t(1) << 22), [&](int64_t c0, int64_t c1) {
    const size_t end = std::min(n, size_t(c1) * kChunk);
    for (size_t i = size_t(c0) * kChunk; i < end; ++i) out[i] = convert(i);
  });
  return out;
}

}  // namespace

struct Linear::Impl {
  int out_features = 0, in_features = 0;
  DType compute = DType::BF16;
  WeightBlock packed;  // see gemm_packed.h (or qgemm.h) for the layout (the same for every ISA); on huge pages
  size_t packed_bytes = 0;
  bool quantized = false;
  QuantType quant = QuantType::Q8_0;  // when quantized
  std::vector<Linear> parts;  // stacked(): the quantized parts, in output order (packed is then empty)
  std::vector<cpu::QgemmPart> qgemm_parts;  // stacked(): the parts as qgemm_stacked reads them
  std::string stacked_name;   // stacked(): the parts' formats, "+"-joined
};

Linear::Linear(const void* weight, DType weight_dtype, int out_features, int in_features, QuantType quant) {
  TS_CHECK(out_features > 0 && in_features > 0, "Linear: expected positive shape, got ", out_features, "x",
           in_features);
  TS_CHECK(cpu::qgemm_supports(quant), "Linear: ", quant_type_name(quant), " weights are not supported");
  TS_CHECK(in_features % block_values(quant) == 0, "Linear: ", quant_type_name(quant),
           " needs in_features a multiple of ", block_values(quant), ", got ", in_features);
  *this = quantized_shell(quant, out_features, in_features);
  uint8_t* packed = static_cast<uint8_t*>(impl_->packed.get());
  const size_t rb = row_bytes(quant, in_features);
  const size_t group_packed_bytes = cpu::qgemm_packed_bytes(quant, cpu::kQGroup, in_features);
  // Rows are independent, and a 16-row group's packed bytes depend on its rows alone: each thread quantizes a group's
  // rows into its own small buffer of GGUF blocks, then packs that group in place. No matrix-sized buffer of blocks is
  // written and freed in between (fresh memory costs a page fault per 4 KiB on first touch). The K-quants' fits take
  // the variant's vector kernels (the reference's bytes, 8 or 16 sub-blocks at a time).
  const auto quantize_q4_k = cpu::active_kernels().quantize_q4_k;
  const auto quantize_q6_k = cpu::active_kernels().quantize_q6_k;
  const auto widen_row = cpu::active_kernels().widen_row;  // bf16 / f16 -> f32, exact (weight_f32's values)
  cpu::parallel_ranges(cpu::qgemm_groups(out_features), true, [&](int64_t g0, int64_t g1) {
    std::vector<float> row(in_features);                   // [in]
    std::vector<uint8_t> group_blocks(rb * cpu::kQGroup);  // [16 rows][rb bytes of blocks]
    for (int64_t g = g0; g < g1; ++g) {
      const int row0 = int(g) * cpu::kQGroup, rows = std::min(cpu::kQGroup, out_features - row0);
      for (int r = 0; r < rows; ++r) {
        const size_t offset = size_t(row0 + r) * in_features;
        if (weight_dtype == DType::F32) {
          std::memcpy(row.data(), static_cast<const float*>(weight) + offset, size_t(in_features) * 4);
        } else {
          widen_row(static_cast<const uint16_t*>(weight) + offset, weight_dtype == DType::BF16, in_features,
                    row.data());
        }
        uint8_t* row_blocks = group_blocks.data() + rb * r;
        if (quant == QuantType::Q4_K) {
          quantize_q4_k(row.data(), row_blocks, in_features / kQK_K);
        } else if (quant == QuantType::Q6_K) {
          quantize_q6_k(row.data(), row_blocks, in_features / kQK_K);
        } else {
          ref::quantize_row(quant, row.data(), row_blocks, in_features);
        }
      }
      cpu::qgemm_pack(quant, group_blocks.data(), rows, in_features, packed + size_t(g) * group_packed_bytes);
    }
  });
}

Linear Linear::quantized_shell(QuantType quant, int out_features, int in_features) {
  Linear l;
  l.impl_ = std::make_unique<Impl>();
  Impl& m = *l.impl_;
  m.out_features = out_features;
  m.in_features = in_features;
  m.compute = DType::F32;
  m.quantized = true;
  m.quant = quant;
  m.packed_bytes = cpu::qgemm_packed_bytes(quant, out_features, in_features);
  m.packed = allocate_weight_block(m.packed_bytes);
  return l;
}

Linear Linear::from_blocks(const void* blocks, QuantType quant, int out_features, int in_features) {
  TS_CHECK(out_features > 0 && in_features > 0 && cpu::qgemm_supports(quant) && in_features % block_values(quant) == 0,
           "Linear: cannot run ", quant_type_name(quant), " weights of shape ", out_features, "x", in_features);
  Linear l = quantized_shell(quant, out_features, in_features);
  cpu::qgemm_pack(quant, blocks, out_features, in_features, static_cast<uint8_t*>(l.impl_->packed.get()));
  return l;
}

Linear Linear::stacked(std::vector<Linear> parts) {
  TS_CHECK(!parts.empty(), "Linear::stacked: no parts");
  if (parts.size() == 1) return std::move(parts[0]);
  Linear l;
  l.impl_ = std::make_unique<Impl>();
  Impl& m = *l.impl_;
  m.in_features = parts[0].in_features();
  m.compute = DType::F32;
  m.quantized = true;
  m.quant = parts[0].quant_type();
  for (const Linear& p : parts) {
    TS_CHECK(p.impl_ && p.quantized() && p.impl_->parts.empty() && p.in_features() == m.in_features,
             "Linear::stacked: parts must be quantized products of one input width (", m.in_features, ")");
    m.out_features += p.out_features();
    m.packed_bytes += p.weight_bytes();
    const std::string f = p.format_name();
    if (m.stacked_name.find(f) == std::string::npos) m.stacked_name += (m.stacked_name.empty() ? "" : "+") + f;
  }
  m.parts = std::move(parts);
  for (const Linear& p : m.parts)  // the parts' packed weights stay where they are: their Impls only moved
    m.qgemm_parts.push_back({p.impl_->quant, static_cast<const uint8_t*>(p.impl_->packed.get()), p.out_features()});
  return l;
}

Linear::Linear(const void* weight, DType weight_dtype, int out_features, int in_features, DType compute)
    : impl_(std::make_unique<Impl>()) {
  TS_CHECK(out_features > 0 && in_features > 0, "Linear: expected positive shape, got ", out_features, "x",
           in_features);
  TS_CHECK(weight_dtype == DType::F32 || weight_dtype == DType::F16 || weight_dtype == DType::BF16,
           "Linear: weight dtype must be F32, F16 or BF16, got ", dtype_name(weight_dtype));
  TS_CHECK(compute == DType::F32 || compute == DType::BF16, "Linear: compute type must be F32 or BF16, got ",
           dtype_name(compute));
  Impl& m = *impl_;
  m.out_features = out_features;
  m.in_features = in_features;
  m.compute = compute;
  const size_t n = size_t(out_features) * in_features;
  if (compute == DType::BF16) {
    // Checkpoint already in the compute type: pack straight from it (an lm_head can be ~300 MB).
    std::unique_ptr<uint16_t[]> converted;
    const uint16_t* w = static_cast<const uint16_t*>(weight);  // [out, in]
    if (weight_dtype != DType::BF16) {
      converted = converted_weights<uint16_t>(n, [&](size_t i) { return weight_bf16(weight, weight_dtype, i); });
      w = converted.get();
    }
    m.packed_bytes = cpu::packed_elems_bf16(out_features, in_features) * 2;
    // Zeroed slack after the last group (allocate_weight_block zeroes): the amx GEMM's last k step reads whole
    // 16-pair B tiles (gemm_packed.h).
    m.packed = allocate_weight_block(m.packed_bytes + cpu::kPackedSlackBytes);
    cpu::pack_bf16(w, out_features, in_features, static_cast<uint16_t*>(m.packed.get()));
  } else {
    std::unique_ptr<float[]> converted;
    const float* w = static_cast<const float*>(weight);  // [out, in]
    if (weight_dtype != DType::F32) {
      converted = converted_weights<float>(n, [&](size_t i) { return weight_f32(weight, weight_dtype, i); });
      w = converted.get();
    }
    m.packed_bytes = cpu::packed_elems_f32(out_features, in_features) * 4;
    m.packed = allocate_weight_block(m.packed_bytes);
    cpu::pack_f32(w, out_features, in_features, static_cast<float*>(m.packed.get()));
  }
}

Linear::Linear() = default;
Linear::~Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;

void Linear::forward(const float* x, int rows, float* y) const {
  const Impl& m = *impl_;
  TS_CHECK(rows >= 1, "Linear::forward: expected rows >= 1, got ", rows);
  const cpu::KernelTable& kernels = cpu::active_kernels();
  if (m.quantized) {
    thread_local cpu::QuantizedRows acts;  // [rows, in / 32] blocks of x
    const cpu::QgemmKernel kernel = kernels.qgemm->kernel;
    cpu::quantize_rows(kernel, x, rows, m.in_features, &acts);
    return forward_blocks(acts, rows, y);
  }
  if (m.compute == DType::F32) {
    return kernels.linear_f32(x, static_cast<const float*>(m.packed.get()), y, rows, m.out_features, m.in_features);
  }
  kernels.linear_bf16(x, static_cast<const uint16_t*>(m.packed.get()), y, rows, m.out_features, m.in_features);
}

void Linear::forward_columns(const float* x, int rows, int col_begin, int col_end, float* y) const {
  const Impl& m = *impl_;
  TS_CHECK(rows >= 1 && 0 <= col_begin && col_begin < col_end && col_end <= m.out_features,
           "Linear::forward_columns: columns [", col_begin, ", ", col_end, ") of ", m.out_features, " for ", rows,
           " rows");
  const int cols = col_end - col_begin;
  const cpu::KernelTable& kernels = cpu::active_kernels();
  if (m.quantized && m.parts.empty() && col_begin % cpu::kQGroup == 0) {
    thread_local cpu::QuantizedRows acts;  // [rows, in / 32] blocks of x
    const cpu::QgemmKernel kernel = kernels.qgemm->kernel;
    cpu::quantize_rows(kernel, x, rows, m.in_features, &acts);
    const size_t group_bytes = cpu::qgemm_packed_bytes(m.quant, cpu::kQGroup, m.in_features);
    const uint8_t* groups = static_cast<const uint8_t*>(m.packed.get()) + group_bytes * (col_begin / cpu::kQGroup);
    return cpu::qgemm(kernel, m.quant, acts, groups, y, cols, m.in_features);
  }
  if (!m.quantized && col_begin % cpu::kGroupCols == 0) {
    const size_t group = size_t(col_begin / cpu::kGroupCols);
    if (m.compute == DType::F32) {
      const float* groups = static_cast<const float*>(m.packed.get()) + group * cpu::packed_elems_f32(1, m.in_features);
      return kernels.linear_f32(x, groups, y, rows, cols, m.in_features);
    }
    // The groups after col_end lie where the amx GEMM's last k step may read past its last group: real weights
    // instead of the zero slack, against zero activations, so they add nothing.
    const uint16_t* groups =
        static_cast<const uint16_t*>(m.packed.get()) + group * cpu::packed_elems_bf16(1, m.in_features);
    return kernels.linear_bf16(x, groups, y, rows, cols, m.in_features);
  }
  thread_local std::vector<float> all;  // [rows, out_features]
  all.resize(size_t(rows) * m.out_features);
  forward(x, rows, all.data());
  for (int r = 0; r < rows; ++r)
    std::memcpy(y + size_t(r) * cols, all.data() + size_t(r) * m.out_features + col_begin, sizeof(float) * cols);
}

void Linear::forward_blocks(const cpu::QuantizedRows& acts, int rows, float* y) const {
  const Impl& m = *impl_;
  TS_CHECK(acts.rows == rows, "Linear::forward_blocks: ", acts.rows, " quantized rows for ", rows);
  const cpu::QgemmKernel kernel = cpu::active_kernels().qgemm->kernel;
  if (m.parts.empty())
    return cpu::qgemm(kernel, m.quant, acts, static_cast<const uint8_t*>(m.packed.get()), y, m.out_features,
                      m.in_features);
  thread_local std::vector<std::vector<float>> part_y;  // [parts][rows, a part's out_features]
  cpu::qgemm_stacked(kernel, m.qgemm_parts, acts, y, m.in_features, part_y);
}

void Linear::swiglu_mlp(const Linear& gate_up, const Linear& down, const float* x, int rows, float* y) {
  const Impl& gu = *gate_up.impl_;
  const Impl& dn = *down.impl_;
  const int inter = dn.in_features;
  TS_CHECK(rows >= 1 && gu.out_features == 2 * inter,
           "Linear::swiglu_mlp: gate_up has ", gu.out_features, " outputs for a down of ", inter, " inputs");
  thread_local std::vector<float> gate_up_rows, act_rows;  // [rows, 2 I] = [gate | up] per row; [rows, I]
  gate_up_rows.resize(size_t(rows) * 2 * inter);
  act_rows.resize(size_t(rows) * inter);
  if (!(gu.quantized && gu.parts.empty() && dn.quantized && inter % cpu::kQBlock == 0)) {
    gate_up.forward(x, rows, gate_up_rows.data());
    swiglu_rows(gate_up_rows.data(), rows, inter, act_rows.data());
    return down.forward(act_rows.data(), rows, y);
  }
  const cpu::QgemmKernel kernel = cpu::active_kernels().qgemm->kernel;
  thread_local cpu::QuantizedRows x_blocks, act_blocks;  // x: [rows, in / 32] blocks; the swiglu rows: [rows, I / 32]
  cpu::quantize_rows(kernel, x, rows, gu.in_features, &x_blocks);
  act_blocks.shape(rows, inter);
  // Pointers, not the thread_local names, inside the tasks (a worker's own copies are empty).
  const cpu::QuantizedRows* xq = &x_blocks;
  cpu::QuantizedRows* aq = &act_blocks;
  float* gate_up_y = gate_up_rows.data();
  float* act = act_rows.data();
  const uint8_t* packed = static_cast<const uint8_t*>(gu.packed.get());
  const int blocks = inter / cpu::kQBlock, up_group = inter / cpu::kQGroup;
  const bool worth = cpu::gemm_worth_threads(rows, gu.out_features, gu.in_features, 1);
  cpu::parallel_ranges(blocks, worth, [&](int64_t b0, int64_t b1) {
    const int g0 = int(b0) * 2, g1 = int(b1) * 2;  // two 16-output groups per 32-column block
    cpu::qgemm_group_range(kernel, gu.quant, *xq, packed, gate_up_y, gu.out_features, gu.in_features, g0, g1);
    cpu::qgemm_group_range(kernel, gu.quant, *xq, packed, gate_up_y, gu.out_features, gu.in_features, up_group + g0,
                           up_group + g1);
    const int c0 = int(b0) * cpu::kQBlock, cols = int(b1 - b0) * cpu::kQBlock;
    for (int r = 0; r < rows; ++r) {
      const float* gate = gate_up_y + size_t(r) * 2 * inter;  // [gate | up]
      swiglu(gate + c0, gate + inter + c0, act + size_t(r) * inter + c0, cols);
      cpu::quantize_block_range(kernel, act, int64_t(r) * blocks + b0, int64_t(r) * blocks + b1, aq);
    }
  });
  down.forward_blocks(act_blocks, rows, y);
}

int Linear::out_features() const { return impl_->out_features; }
int Linear::in_features() const { return impl_->in_features; }
DType Linear::compute_type() const { return impl_->compute; }
size_t Linear::weight_bytes() const { return impl_->packed_bytes; }
bool Linear::quantized() const { return impl_->quantized; }
QuantType Linear::quant_type() const { return impl_->quant; }
const char* Linear::format_name() const {
  if (!impl_->parts.empty()) return impl_->stacked_name.c_str();
  if (impl_->quantized) return quant_type_name(impl_->quant);
  return impl_->compute == DType::BF16 ? "bf16" : "f32";
}

const char* Linear::backend_name() const {
  const cpu::KernelTable& kernels = cpu::active_kernels();
  if (impl_->quantized) return kernels.qgemm->backend;
  return impl_->compute == DType::BF16 ? kernels.linear_bf16_backend : kernels.linear_f32_backend;
}

}  // namespace ts::kernels
