// What each matrix of a target is stored as for the GEMM: the checkpoint's float type (bf16 or f32 compute), or
// a quantized format chosen per matrix by a scheme (`--quantize`).
//
// Schemes (round to nearest, no importance matrix; norms, biases and the embedding table stay as stored, the
// embedding rows are read from the checkpoint in place):
//   q8_0  every projection and the lm_head in Q8_0 (as llama.cpp's Q8_0 files).
//   q4_0  every projection in Q4_0; the lm_head in Q8_0 (llama.cpp's Q4_0 files keep it in Q6_K, a format the
//         integer GEMM does not run yet; Q8_0 is the closer of the two it runs).
// A matrix whose in_features is not a multiple of 32 stays in the float format (llama.cpp falls back likewise).
#pragma once

#include <optional>
#include <string>

#include "core/dtype.h"
#include "kernels/quant.h"

namespace ts {

enum class WeightScheme { Native, Q8_0, Q4_0 };

const char* weight_scheme_name(WeightScheme s);  // "native", "q8_0", "q4_0"
// "native" | "bf16" | "q8_0" | "q4_0" (any case) -> scheme; ts::Error naming the valid ones otherwise.
WeightScheme parse_weight_scheme(const std::string& name);

enum class MatrixRole { AttnQkv, AttnOut, MlpGateUp, MlpDown, LmHead, DrafterFc };

struct WeightPlan {
  DType compute = DType::BF16;  // the float GEMM's type (F32 or BF16) for matrices left unquantized
  WeightScheme scheme = WeightScheme::Native;

  // The quantized format of one matrix, or nullopt for the float GEMM.
  std::optional<kernels::QuantType> quant_for(MatrixRole role, int in_features) const;
};

}  // namespace ts
