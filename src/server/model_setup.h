// What `treespark serve` and `treespark bench serve` share to put a model pair behind the server: the served
// model's description for the HTTP layer, and the cost curve L(b, k) (+ the drafter's batched cost F(b)) that the
// load-adaptive policy prices nodes with -- read from `treespark bench forward --json` output or measured at
// start-up.
#pragma once

#include <string>
#include <vector>

#include "engine/model_bundle.h"
#include "server/openai_request.h"
#include "spec/theta_policy.h"

namespace ts::server {

// The HTTP layer's view of a loaded bundle. Throws ts::Error when the target folder has no tokenizer.json.
ServedModel describe_model(const ModelBundle& bundle, const std::string& name, int max_context);

// Reads {"points": [{"batch", "k", "ms"}, ...], "fixed_ms"?, "fixed_ms_by_batch"?: [..]} (bench forward's --json
// output, optionally with the drafter's cost added). Throws ts::Error on a malformed or incomplete grid.
spec::CostModel read_cost_model_json(const std::string& path);
void write_cost_model_json(const spec::CostModel& cost, const std::string& path);

// Measures L(b, k) for b in `batches` and the drafter's batched block forward F(b) (Drafter::draft_blocks over b
// states) at a short context.
spec::CostModel measure_serving_cost(ModelBundle& bundle, const std::vector<int>& batches, int reps = 3);

// 1, 2, 4, ... up to max_batch (max_batch itself included).
std::vector<int> batch_ladder(int max_batch);

}  // namespace ts::server
