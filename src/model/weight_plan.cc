#include "model/weight_plan.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace ts {

const char* weight_scheme_name(WeightScheme s) {
  switch (s) {
    case WeightScheme::Native: return "native";
    case WeightScheme::Q8_0: return "q8_0";
    case WeightScheme::Q4_0: return "q4_0";
    case WeightScheme::Q4_K_M: return "q4_k_m";
  }
  return "?";
}

WeightScheme parse_weight_scheme(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "native" || n == "bf16" || n.empty()) return WeightScheme::Native;
  if (n == "q8_0") return WeightScheme::Q8_0;
  if (n == "q4_0") return WeightScheme::Q4_0;
  if (n == "q4_k_m") return WeightScheme::Q4_K_M;
  TS_FAIL("unknown weight format '", name, "': expected native, q8_0, q4_0 or q4_k_m");
}

MatrixRole part_role(MatrixRole role, size_t part) {
  return role == MatrixRole::AttnQkv && part == 2 ? MatrixRole::AttnV : role;
}

std::vector<size_t> format_runs(const std::vector<int>& keys) {
  std::vector<size_t> bounds{0};
  for (size_t i = 1; i < keys.size(); ++i)
    if (keys[i] != keys[i - 1]) bounds.push_back(i);
  bounds.push_back(keys.size());
  return bounds;
}

bool WeightPlan::more_bits_layer(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

std::optional<kernels::QuantType> WeightPlan::quant_for(MatrixRole role, int in_features) const {
  using kernels::QuantType;
  if (scheme == WeightScheme::Native || in_features % kernels::kQK8_0 != 0) return std::nullopt;
  if (scheme == WeightScheme::Q8_0 || (scheme == WeightScheme::Q4_0 && role == MatrixRole::LmHead)) return QuantType::Q8_0;
  if (scheme == WeightScheme::Q4_0) return QuantType::Q4_0;
  if (in_features % kernels::kQK_K != 0) return QuantType::Q8_0;  // q4_k_m on a width the K-quants cannot take
  const bool more_bits = (role == MatrixRole::MlpDown || role == MatrixRole::AttnV) && layer >= 0 &&
                         more_bits_layer(layer, n_layers);
  return role == MatrixRole::LmHead || more_bits ? QuantType::Q6_K : QuantType::Q4_K;
}

}  // namespace ts
