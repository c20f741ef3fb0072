// Internal: y = x W^T through oneDNN's matmul, weights reordered once into the layout oneDNN picks (format_tag::any).
// Kept as an alternative backend (bench_linear compares it with the packed GEMM); primitives are cached per row
// count M because oneDNN 2.6 compiles one per shape.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <dnnl.hpp>

namespace ts::kernels::cpu {

class DnnlMatmul {
 public:
  // w: [out, in] row-major, bf16 bits when bf16 is true, else f32.
  DnnlMatmul(const void* w, bool bf16, int out_features, int in_features);
  // x: [rows, in] (bf16 bits or f32 as at construction) -> y: [rows, out] f32.
  void forward(const void* x, int rows, float* y) const;
  size_t weight_bytes() const { return weights_.get_desc().get_size(); }
  const char* impl_name() const;  // e.g. "brg:avx512_core_bf16"

 private:
  const dnnl::matmul& primitive_for(int rows) const;

  bool bf16_;
  int out_features_, in_features_;
  dnnl::engine engine_;
  dnnl::memory weights_;  // packed, oneDNN's layout
  mutable std::mutex mutex_;
  mutable std::map<int, std::unique_ptr<dnnl::matmul>> by_rows_;
  std::string impl_name_;
};

}  // namespace ts::kernels::cpu
