// What each matrix of a target is stored as for the GEMM: the checkpoint's float type (bf16 or f32 compute), or
// a quantized format chosen per matrix by a scheme (`--quantize`).
//
// Schemes (round to nearest, no importance matrix; norms, biases and the embedding table stay as stored, the
// embedding rows are read from the checkpoint in place):
//   q8_0  every projection and the lm_head in Q8_0 (as llama.cpp's Q8_0 files).
//   q4_0  every projection in Q4_0; the lm_head in Q8_0.
//   q4_k_m llama.cpp's Q4_K_M mix: Q4_K everywhere, except Q6_K for the lm_head and, in the layers where
//         llama.cpp gives attn_v and ffn_down more bits (the first and last eighth and every third layer between:
//         use_more_bits), for ffn_down and v_proj (the fused q/k/v product then holds q and k in Q4_K and v in
//         Q6_K: kernels::Linear::stacked). The same formats, tensor for tensor, as llama.cpp's file.
// A matrix whose in_features is not a multiple of the format's block (32; 256 for the K-quants) falls back to Q8_0
// where it can and to the float format otherwise (llama.cpp falls back likewise).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant.h"

namespace ts {

enum class WeightScheme { Native, Q8_0, Q4_0, Q4_K_M };

const char* weight_scheme_name(WeightScheme s);  // "native", "q8_0", "q4_0", "q4_k_m"
// "native" | "bf16" | "q8_0" | "q4_0" | "q4_k_m" (any case) -> scheme; ts::Error naming the valid ones otherwise.
WeightScheme parse_weight_scheme(const std::string& name);

// AttnV: the v part of the fused AttnQkv product (part_role), which a mix may store apart.
enum class MatrixRole { AttnQkv, AttnV, AttnOut, MlpGateUp, MlpDown, LmHead, DrafterFc };

// The role of part `part` of a fused product of `role` (q, k, v for AttnQkv: v is AttnV).
MatrixRole part_role(MatrixRole role, size_t part);
// A fused product's parts in runs of one format (keys: one per part, equal for parts stored alike): each run's
// first part, then keys.size(). The loaders pack a run as one product and stack the runs (kernels::Linear::stacked).
std::vector<size_t> format_runs(const std::vector<int>& keys);

struct WeightPlan {
  DType compute = DType::BF16;  // the float GEMM's type (F32 or BF16) for matrices left unquantized
  WeightScheme scheme = WeightScheme::Native;
  int layer = -1, n_layers = 0;  // the layer being loaded (q4_k_m's choice depends on it); -1 outside layers

  // The quantized format of one matrix, or nullopt for the float GEMM.
  std::optional<kernels::QuantType> quant_for(MatrixRole role, int in_features) const;
  // llama.cpp's use_more_bits(layer, n_layers).
  static bool more_bits_layer(int layer, int n_layers);
};

}  // namespace ts
