// Single-request generation: plain decoding or speculative rounds (chain, fixed tree, marginal tree, TreeSpark),
// as a client of the step engine (engine.h) with one request: the same code path as batched serving.
//
// A round: the drafter drafts one block from the anchor (the newest token, sampled but not yet in the target's
// cache); spec_decode::expand grows the draft tree; one target forward runs over [anchor + tree] with the tree's
// ancestor mask; spec_decode::verify walks the tree; the accepted path's KV rows are kept and compacted, their target
// hidden states extend the drafter's context, and the bonus token becomes the next anchor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/metrics.h"
#include "engine/request.h"
#include "model/drafter.h"
#include "model/target_model.h"
#include "sampling/sampling_params.h"
#include "spec_decode/calibration.h"
#include "spec_decode/expand.h"

namespace ts {

// The options of one generation: a request's options (request.h) with the CLI's default context limit.
struct GenerateOptions : RequestOptions {
  GenerateOptions() { max_context = 4096; }
};

using GenerationStats = RequestStats;

struct GenerationResult {
  std::vector<int32_t> ids;  // generated tokens (stop token included when one ended the generation)
  std::vector<TokenLogprobs> logprobs;  // [ids.size()] with options.logprobs >= 0 (request.h), else empty
  std::string finish_reason; // "stop", "length" (finish_reason_name)
  GenerationStats stats;
  std::vector<spec_decode::EdgeRecord> edges;  // with collect_edges
};

class Generator {
 public:
  // drafter may be null (then only DecodeMode::None works).
  Generator(TargetModel& target, Drafter* drafter, spec_decode::Calibration calibration = {});

  // on_token(id) is called for every generated token as soon as it is final.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                            const std::function<void(int32_t)>& on_token = nullptr);
  // Called after every engine step with what it did (EngineConfig::on_step): the policy's decisions, for logs.
  void set_on_step(std::function<void(const StepReport&)> on_step) { on_step_ = std::move(on_step); }
  // The ids its engine may emit (EngineConfig::emit_vocab; 0 = all).
  void set_emit_vocab(int emit_vocab) { emit_vocab_ = emit_vocab; }

 private:
  TargetModel& target_;
  Drafter* drafter_;
  spec_decode::Calibration calibration_;
  std::function<void(const StepReport&)> on_step_;
  int emit_vocab_ = 0;
};

}  // namespace ts
