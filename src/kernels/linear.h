// A linear layer y = x W^T with weights packed once at load for the matmul library (oneDNN).
#pragma once

#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace ts::kernels {

class Linear {
 public:
  // weight: [out_features, in_features] row-major as stored by Hugging Face, of dtype F32, F16 or BF16.
  // compute: BF16 (weights kept in bf16, activations rounded to bf16, f32 accumulation) or F32.
  // F16 weights are converted at load to the compute type.
  Linear(const void* weight, DType weight_dtype, int out_features, int in_features, DType compute);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;

  // x: [rows, in_features] f32 -> y: [rows, out_features] f32. Any rows >= 1.
  // A row's output never depends on the other rows or on `rows` (bit-identical for every batch shape).
  void forward(const float* x, int rows, float* y) const;

  int out_features() const;
  int in_features() const;
  DType compute_type() const;
  size_t weight_bytes() const;  // bytes of packed weights streamed per forward

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace ref {
// Scalar reference: y[r, o] = sum_i x[r, i] * w[o, i], where w and (for bf16 compute) x are rounded like Linear.
void linear(const float* x, const float* w_f32, float* y, int rows, int out_features, int in_features);
}  // namespace ref

}  // namespace ts::kernels
