#include "server/model_setup.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sampling_defaults.h"

namespace ts::server {

ServedModel describe_model(const ModelBundle& bundle, const std::string& name, int max_context) {
  TS_CHECK(bundle.tokenizer, "serving needs a tokenizer.json in ", bundle.model_dir);
  ServedModel m;
  m.name = name;
  m.tokenizer = bundle.tokenizer.get();
  m.chat_template = bundle.chat_template.get();
  m.stop_ids = bundle.stop_ids();
  m.max_context = max_context;
  m.vocab_size = bundle.target->config().vocab_size;
  return m;
}

SamplingDefaults sampling_defaults(const GenerationConfig& g) {
  // The file's values and its do_sample rule are choose_sampling's (range-checked there); what the file leaves out
  // keeps OpenAI's default, which differs from the engine's only in the temperature (1, not greedy).
  const SamplingChoice c = choose_sampling({}, g);
  SamplingDefaults d;
  if (c.temperature_source != "default") d.temperature = c.params.temperature;
  d.top_p = c.params.top_p;
  d.top_k = c.params.top_k;
  d.min_p = c.params.min_p;
  d.repetition_penalty = c.repetition_penalty;
  if (g.max_new_tokens) d.max_tokens = *g.max_new_tokens;
  return d;
}

std::vector<int> batch_ladder(int max_batch) {
  std::vector<int> b;
  for (int x = 1; x < max_batch; x *= 2) b.push_back(x);
  b.push_back(std::max(1, max_batch));
  return b;
}

}  // namespace ts::server
