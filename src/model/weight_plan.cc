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
  }
  return "?";
}

WeightScheme parse_weight_scheme(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "native" || n == "bf16" || n.empty()) return WeightScheme::Native;
  if (n == "q8_0") return WeightScheme::Q8_0;
  if (n == "q4_0") return WeightScheme::Q4_0;
  TS_FAIL("unknown weight format '", name, "': expected native, q8_0 or q4_0");
}

std::optional<kernels::QuantType> WeightPlan::quant_for(MatrixRole role, int in_features) const {
  if (scheme == WeightScheme::Native || in_features % kernels::kQK8_0 != 0) return std::nullopt;
  if (scheme == WeightScheme::Q8_0 || role == MatrixRole::LmHead) return kernels::QuantType::Q8_0;
  return kernels::QuantType::Q4_0;
}

}  // namespace ts
