// What `treespark serve` and `treespark bench serve` share to put a model pair behind the server: the served
// model's description for the HTTP layer and the batch sizes the start-up cost curve is measured at (the curve
// itself: engine/cost_curve.h).
#pragma once

#include <string>
#include <vector>

#include "engine/model_bundle.h"
#include "server/openai_request.h"

namespace ts::server {

// The HTTP layer's view of a loaded bundle, with OpenAI's sampling defaults (set `sampling` from
// sampling_defaults() to serve the checkpoint's). Throws ts::Error when the target folder has no tokenizer.json.
ServedModel describe_model(const ModelBundle& bundle, const std::string& name, int max_context);

// The sampling defaults generation_config.json gives, as vLLM applies the file (its --generation-config auto):
// temperature (0 with do_sample false), top_p, top_k, min_p and repetition_penalty for fields a request leaves out,
// max_new_tokens as the bound of a request that names no length; what the file leaves out keeps OpenAI's default.
SamplingDefaults sampling_defaults(const GenerationConfig& generation_config);

// 1, 2, 4, ... up to max_batch (max_batch itself included).
std::vector<int> batch_ladder(int max_batch);

}  // namespace ts::server
