// Which sampling values a request uses: explicit flags first, then the checkpoint's generation_config.json, then
// the engine's defaults (greedy, no truncation). Records where each value came from, for --json output.
#pragma once

#include <optional>
#include <string>

#include "model/config.h"
#include "sampling/sampling_params.h"

namespace ts {

// Values given explicitly (e.g. on the command line); unset = not given.
struct SamplingOverrides {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
};

struct SamplingChoice {
  SamplingParams params;  // seed left at 0: the caller sets it
  float repetition_penalty = 1;  // (0, 10]; 1 = off (RequestOptions::repetition_penalty)
  // Per value: "flag", "generation_config.json", "generation_config.json (do_sample=false)" or "default".
  std::string temperature_source, top_p_source, top_k_source, min_p_source, repetition_penalty_source;
};

// As vLLM reads generation_config.json: temperature, top_p, top_k, min_p and repetition_penalty become the
// defaults. do_sample=false (as Hugging Face) makes the default greedy (temperature 0) whatever its temperature
// says; absent do_sample leaves the file's values in force. Throws ts::Error if the result is out of range.
SamplingChoice choose_sampling(const SamplingOverrides& overrides, const GenerationConfig& generation_config);

}  // namespace ts
