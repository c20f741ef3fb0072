#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"

namespace ts {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Yarn's mscale: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The (fractional) pair dimension at which a frequency makes `rotations` turns over `context` positions.
double yarn_correction_dim(double rotations, int dim, double base, int context) {
  return dim * std::log(context / (rotations * 2 * kPi)) / (2 * std::log(base));
}

}  // namespace

RopeTable rope_table(const RopeConfig& rope, int head_dim) {
  TS_CHECK(head_dim > 0 && head_dim % 2 == 0, "RoPE: head_dim must be positive and even, got ", head_dim);
  const int half = head_dim / 2;
  RopeTable t;
  t.inv_freq.resize(half);
  kernels::rope_default_inv_freq(float(rope.theta), head_dim, t.inv_freq.data());
  switch (rope.type) {
    case RopeType::Default:
      break;
    case RopeType::Linear:
      for (float& f : t.inv_freq) f = float(double(f) / rope.factor);
      break;
    case RopeType::Llama3: {
      const double old_context = rope.original_max_position_embeddings;
      const double low_freq_wavelen = old_context / rope.low_freq_factor;
      const double high_freq_wavelen = old_context / rope.high_freq_factor;
      for (float& f : t.inv_freq) {
        const double inv = f, wavelen = 2 * kPi / inv;
        if (wavelen > low_freq_wavelen) {
          f = float(inv / rope.factor);
        } else if (wavelen >= high_freq_wavelen) {  // medium band: interpolate
          const double smooth =
              (old_context / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
          f = float((1 - smooth) * inv / rope.factor + smooth * inv);
        }  // high frequencies (wavelen < high_freq_wavelen) unchanged
      }
      break;
    }
    case RopeType::Yarn: {
      const int context = rope.original_max_position_embeddings;
      TS_CHECK(context > 0, "RoPE yarn: original_max_position_embeddings must be positive");
      double low = yarn_correction_dim(rope.beta_fast, head_dim, rope.theta, context);
      double high = yarn_correction_dim(rope.beta_slow, head_dim, rope.theta, context);
      if (rope.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, double(head_dim - 1));
      if (low == high) high += 0.001;  // as Hugging Face: avoid a zero-width ramp
      for (int i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation_weight = 1 - ramp;  // high-frequency pairs keep the original frequency
        const double extrapolated = t.inv_freq[i], interpolated = extrapolated / rope.factor;
        t.inv_freq[i] = float(interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight);
      }
      double attention = rope.attention_factor;
      if (attention <= 0) {
        attention = rope.mscale != 0 && rope.mscale_all_dim != 0
                        ? yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim)
                        : yarn_mscale(rope.factor, 1.0);
      }
      t.attention_scale = float(attention);
      break;
    }
  }
  return t;
}

}  // namespace ts
