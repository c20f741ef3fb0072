// What `treespark serve` and `treespark bench serve` share to put a model pair behind the server: the served
// model's description for the HTTP layer and the batch sizes the start-up cost curve is measured at (the curve
// itself: engine/cost_curve.h).
#pragma once

#include <string>
#include <vector>

#include "engine/model_bundle.h"
#include "server/openai_request.h"

namespace ts::server {

// The HTTP layer's view of a loaded bundle. Throws ts::Error when the target folder has no tokenizer.json.
ServedModel describe_model(const ModelBundle& bundle, const std::string& name, int max_context);

// 1, 2, 4, ... up to max_batch (max_batch itself included).
std::vector<int> batch_ladder(int max_batch);

}  // namespace ts::server
