// Fast float softmax for the drafter's q, which expansion computes once per tree node over the whole vocabulary.
// The target's p keeps the double-precision processed_distribution(); q only has to be the exact distribution the
// draft tokens were drawn from, which holds because expansion and verification call this same function under the
// same ISA variant (core/cpu.h; switch variants only between generations), so equal inputs give equal outputs.
#pragma once

namespace ts {

// out[i] = exp(z_i - max z) / sum_j exp(z_j - max z), z = logits * inv_temperature; logits, out: [n].
// -inf logits get 0. Throws ts::Error on NaN, +inf, or no finite logit. The active ISA variant's
// kernels::softmax_scaled: vector passes (scaled_max / exp_normalize: a Cephes-style polynomial exp, relative error
// ~1e-7), or the scalar std::exp version (kernels::ref::softmax_scaled) under the scalar variant.
void softmax_f32(const float* logits, int n, float inv_temperature, float* out);

namespace ref {
void softmax_f32(const float* logits, int n, float inv_temperature, float* out);  // the scalar version
}

}  // namespace ts
