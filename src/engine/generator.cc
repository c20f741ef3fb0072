#include "engine/generator.h"

#include "core/error.h"
#include "engine/engine.h"

namespace ts {

Generator::Generator(TargetModel& target, Drafter* drafter, spec_decode::Calibration calibration)
    : target_(target), drafter_(drafter), calibration_(calibration) {
  if (drafter_) check_pair(drafter_->config(), target_.config(), "drafter");
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                     const std::function<void(int32_t)>& on_token) {
  // One request on its own engine: the whole prompt in one prefill forward, then one round per step.
  EngineConfig config;
  config.max_batch = 1;
  config.max_queue = 1;
  config.max_context = target_.config().max_position_embeddings;
  config.prefill_chunk = config.max_context;
  config.on_step = on_step_;
  config.emit_vocab = emit_vocab_;
  // No prefix cache: this engine ends with its one request, so nothing could ever hit it, and storing the request's
  // rows into a fresh pool at the end would allocate, fault in and copy all of them on every call.
  config.prefix_cache = false;
  Engine engine(target_, drafter_, config);

  Request request;
  request.prompt = prompt;
  request.options = options;
  if (!request.options.calibration) request.options.calibration = calibration_;
  GenerationResult result;
  bool finished = false;
  std::string error;
  engine.add(std::move(request), [&](const RequestEvent& e) {
    result.logprobs.insert(result.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    for (int32_t id : e.tokens) {
      result.ids.push_back(id);
      if (on_token) on_token(id);
    }
    if (e.finish == FinishReason::None) return;
    finished = true;
    result.finish_reason = finish_reason_name(e.finish);
    result.stats = *e.stats;
    if (e.edges) result.edges = *e.edges;
    if (e.finish == FinishReason::Error) error = e.error;
  });
  while (!engine.idle()) engine.step();
  TS_CHECK(error.empty(), error);
  TS_CHECK(finished, "generation ended without a final event");
  return result;
}

}  // namespace ts
