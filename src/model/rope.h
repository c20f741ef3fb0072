// RoPE frequency tables per RoPE type, as Hugging Face's modeling_rope_utils computes them; kernels::rope applies
// them. The table is computed once at load: positions never change it (no dynamic types are supported).
#pragma once

#include <vector>

#include "model/config.h"

namespace ts {

struct RopeTable {
  std::vector<float> inv_freq;    // [head_dim / 2] per-pair frequencies
  float attention_scale = 1.0f;   // multiplies cos and sin: yarn's attention factor, 1 for the other types
};

// default:  inv_freq_i = theta^(-2i/head_dim)  (in f32, as Hugging Face)
// linear:   default / factor
// llama3:   wavelength 2 pi / inv_freq below original / high_freq_factor kept, above original / low_freq_factor
//           divided by factor, in between interpolated by smooth = (original / wavelength - low) / (high - low)
// yarn:     per pair a ramp between interpolation (default / factor) and extrapolation (default) over the
//           correction range of beta_fast .. beta_slow rotations in the original context; attention_scale
//           = attention_factor, else 0.1 ln(factor) + 1 (or the mscale / mscale_all_dim ratio)
// Throws ts::Error on an odd head_dim.
RopeTable rope_table(const RopeConfig& rope, int head_dim);

}  // namespace ts
