#include "engine/sampling_defaults.h"

#include "core/error.h"

namespace ts {

namespace {

constexpr const char* kFlag = "flag";
constexpr const char* kFile = "generation_config.json";
constexpr const char* kDefault = "default";

template <typename T>
void pick(const std::optional<T>& flag, const std::optional<T>& file, T* value, std::string* source) {
  if (flag) {
    *value = *flag;
    *source = kFlag;
  } else if (file) {
    *value = *file;
    *source = kFile;
  } else {
    *source = kDefault;
  }
}

}  // namespace

SamplingChoice choose_sampling(const SamplingOverrides& overrides, const GenerationConfig& g) {
  SamplingChoice c;
  SamplingParams& p = c.params;
  pick(overrides.temperature, g.temperature, &p.temperature, &c.temperature_source);
  if (!overrides.temperature && g.do_sample == false) {
    p.temperature = 0;
    c.temperature_source = "generation_config.json (do_sample=false)";
  }
  pick(overrides.top_p, g.top_p, &p.top_p, &c.top_p_source);
  pick(overrides.top_k, g.top_k, &p.top_k, &c.top_k_source);
  pick(overrides.min_p, g.min_p, &p.min_p, &c.min_p_source);
  pick(overrides.repetition_penalty, g.repetition_penalty, &c.repetition_penalty, &c.repetition_penalty_source);
  validate_sampling_params(p);
  TS_CHECK(c.repetition_penalty > 0 && c.repetition_penalty <= 10, "repetition_penalty must be in (0, 10], got ",
           c.repetition_penalty);
  return c;
}

}  // namespace ts
