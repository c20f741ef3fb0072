#include "sampling/softmax_f32.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/ops.h"

namespace ts {

namespace {

void check_max(float max_z, int n) {
  TS_CHECK(std::isfinite(max_z), "softmax: expected finite logits with at least one > -inf among ", n,
           ", max (or NaN) is ", max_z);
}

}  // namespace

namespace ref {
void softmax_f32(const float* logits, int n, float inv_temperature, float* out) {
  float max_z = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    TS_CHECK(!std::isnan(logits[i]), "softmax: NaN logit at ", i);
    max_z = std::max(max_z, logits[i] * inv_temperature);
  }
  check_max(max_z, n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += out[i] = std::exp(logits[i] * inv_temperature - max_z);
  const float inv_sum = static_cast<float>(1 / sum);
  for (int i = 0; i < n; ++i) out[i] *= inv_sum;
}
}  // namespace ref

void softmax_f32(const float* logits, int n, float inv_temperature, float* out) {
  TS_CHECK(n > 0, "softmax: n must be > 0, got ", n);
  TS_CHECK(inv_temperature > 0 && std::isfinite(inv_temperature), "softmax: 1/temperature must be > 0, got ",
           inv_temperature);
  if (active_isa() == Isa::Scalar) return ref::softmax_f32(logits, n, inv_temperature, out);
  // Vector passes of the active ISA variant (kernels/ops.h); the max pass reads the input only, so bad input
  // throws before anything is written.
  const float max_z = kernels::scaled_max(logits, n, inv_temperature);
  TS_CHECK(!std::isnan(max_z), "softmax: NaN logit");
  check_max(max_z, n);
  kernels::exp_normalize(logits, n, inv_temperature, max_z, out);
}

}  // namespace ts
