// Scalar reference for Linear: double accumulation, so the only differences from Linear are its f32 accumulation
// order and (for bf16 compute) nothing else, since x and w are rounded here exactly as Linear rounds them.
#include <vector>

#include "core/dtype.h"
#include "kernels/linear.h"

namespace ts::kernels::ref {

void linear(const float* x, const float* w_f32, float* y, int rows, int out_features, int in_features) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * in_features;  // [in]
    for (int o = 0; o < out_features; ++o) {
      const float* wo = w_f32 + size_t(o) * in_features;  // [in]
      double acc = 0.0;
      for (int i = 0; i < in_features; ++i) acc += double(xr[i]) * double(wo[i]);
      y[size_t(r) * out_features + o] = float(acc);
    }
  }
}

void linear(const float* x, const float* w_f32, float* y, int rows, int out_features, int in_features,
            DType compute) {
  if (compute != DType::BF16) return linear(x, w_f32, y, rows, out_features, in_features);
  auto round = [](const float* src, size_t n) {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(src[i]));
    return out;
  };
  std::vector<float> xr = round(x, size_t(rows) * in_features);           // [rows, in]
  std::vector<float> wr = round(w_f32, size_t(out_features) * in_features);  // [out, in]
  linear(xr.data(), wr.data(), y, rows, out_features, in_features);
}

}  // namespace ts::kernels::ref
