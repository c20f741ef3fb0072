#include "sampling/softmax_f32.h"

#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"

namespace ts {

namespace ref {
void softmax_f32(const float* logits, int n, float inv_temperature, float* out) {
  kernels::ref::softmax_scaled(logits, n, inv_temperature, out);
}
}  // namespace ref

void softmax_f32(const float* logits, int n, float inv_temperature, float* out) {
  TS_CHECK(n > 0, "softmax: n must be > 0, got ", n);
  TS_CHECK(inv_temperature > 0 && std::isfinite(inv_temperature), "softmax: 1/temperature must be > 0, got ",
           inv_temperature);
  kernels::softmax_scaled(logits, n, inv_temperature, out);
}

}  // namespace ts
