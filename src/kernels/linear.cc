// Linear: converts the checkpoint's weights once to the compute type and packs them in the layout every variant's
// GEMM reads; per call, the active variant's table entry rounds the activations to bf16 (bf16 compute) and runs
// the product (kernel_table.cc).
#include "kernels/linear.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/weight_memory.h"

namespace ts::kernels {

namespace {

// weight [out, in] of `dtype` -> f32 or bf16 bits, row-major [out, in].
std::vector<float> weights_as_f32(const void* weight, DType dtype, size_t n) {
  std::vector<float> out(n);
  if (dtype == DType::F32) {
    std::memcpy(out.data(), weight, n * 4);
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(weight);
    for (size_t i = 0; i < n; ++i) out[i] = dtype == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
  }
  return out;
}

std::vector<uint16_t> weights_as_bf16(const void* weight, DType dtype, size_t n) {
  std::vector<uint16_t> out(n);
  if (dtype == DType::BF16) {
    std::memcpy(out.data(), weight, n * 2);
  } else if (dtype == DType::F32) {
    const float* src = static_cast<const float*>(weight);
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(weight);
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(f16_to_f32(src[i]));
  }
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
};

Linear::Linear(const void* weight, DType weight_dtype, int out_features, int in_features, QuantType quant) {
  TS_CHECK(out_features > 0 && in_features > 0, "Linear: expected positive shape, got ", out_features, "x",
           in_features);
  TS_CHECK(cpu::qgemm_supports(quant), "Linear: ", quant_type_name(quant), " weights are not supported");
  TS_CHECK(in_features % block_values(quant) == 0, "Linear: ", quant_type_name(quant), " needs in_features a multiple of ",
           block_values(quant), ", got ", in_features);
  const size_t rb = row_bytes(quant, in_features);
  std::vector<uint8_t> blocks(rb * out_features);  // [out][in / 32] blocks
  // Rows are independent: quantize them on the kernels' threads (a 2 GB model has ~1e9 values to round).
  const size_t elem = dtype_size(weight_dtype);
  cpu::parallel_ranges(out_features, true, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const std::vector<float> row =
          weights_as_f32(static_cast<const uint8_t*>(weight) + size_t(o) * in_features * elem, weight_dtype,
                         size_t(in_features));  // [in]
      ref::quantize_row(quant, row.data(), blocks.data() + rb * o, in_features);
    }
  });
  *this = from_blocks(blocks.data(), quant, out_features, in_features);
}

Linear Linear::from_blocks(const void* blocks, QuantType quant, int out_features, int in_features) {
  TS_CHECK(out_features > 0 && in_features > 0 && cpu::qgemm_supports(quant) && in_features % block_values(quant) == 0,
           "Linear: cannot run ", quant_type_name(quant), " weights of shape ", out_features, "x", in_features);
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
  cpu::qgemm_pack(quant, blocks, out_features, in_features, static_cast<uint8_t*>(m.packed.get()));
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
    std::vector<uint16_t> converted;
    const uint16_t* w = static_cast<const uint16_t*>(weight);  // [out, in]
    if (weight_dtype != DType::BF16) {
      converted = weights_as_bf16(weight, weight_dtype, n);
      w = converted.data();
    }
    m.packed_bytes = cpu::packed_elems_bf16(out_features, in_features) * 2;
    // Zeroed slack after the last group (allocate_weight_block zeroes): the amx GEMM's last k step reads whole
    // 16-pair B tiles (gemm_packed.h).
    m.packed = allocate_weight_block(m.packed_bytes + cpu::kPackedSlackBytes);
    cpu::pack_bf16(w, out_features, in_features, static_cast<uint16_t*>(m.packed.get()));
  } else {
    std::vector<float> converted;
    const float* w = static_cast<const float*>(weight);  // [out, in]
    if (weight_dtype != DType::F32) {
      converted = weights_as_f32(weight, weight_dtype, n);
      w = converted.data();
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
    return cpu::qgemm(kernel, m.quant, acts, static_cast<const uint8_t*>(m.packed.get()), y, m.out_features,
                      m.in_features);
  }
  if (m.compute == DType::F32) {
    return kernels.linear_f32(x, static_cast<const float*>(m.packed.get()), y, rows, m.out_features, m.in_features);
  }
  kernels.linear_bf16(x, static_cast<const uint16_t*>(m.packed.get()), y, rows, m.out_features, m.in_features);
}

int Linear::out_features() const { return impl_->out_features; }
int Linear::in_features() const { return impl_->in_features; }
DType Linear::compute_type() const { return impl_->compute; }
size_t Linear::weight_bytes() const { return impl_->packed_bytes; }
bool Linear::quantized() const { return impl_->quantized; }
QuantType Linear::quant_type() const { return impl_->quant; }
const char* Linear::format_name() const {
  if (impl_->quantized) return quant_type_name(impl_->quant);
  return impl_->compute == DType::BF16 ? "bf16" : "f32";
}

const char* Linear::backend_name() const {
  const cpu::KernelTable& kernels = cpu::active_kernels();
  if (impl_->quantized) return kernels.qgemm->backend;
  return impl_->compute == DType::BF16 ? kernels.linear_bf16_backend : kernels.linear_f32_backend;
}

}  // namespace ts::kernels
