// Single-request generation: plain decoding or speculative rounds (chain, fixed tree, marginal tree, TreeSpark).
//
// A round: the drafter drafts one block from the anchor (the newest token, sampled but not yet in the target's
// cache); spec::expand grows the draft tree; one target forward runs over [anchor + tree] with the tree's
// ancestor mask; spec::verify walks the tree; the accepted path's KV rows are kept and compacted, their target
// hidden states extend the drafter's context, and the bonus token becomes the next anchor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/target_model.h"
#include "sampling/sampling_params.h"
#include "spec/calibration.h"
#include "spec/expand.h"

namespace ts {

enum class DecodeMode { None, Chain, Tree };

struct GenerateOptions {
  SamplingParams sampling;
  int max_new_tokens = 64;
  int max_context = 4096;           // prompt + generated tokens
  std::vector<int32_t> stop_ids;    // generation ends after emitting one of these
  DecodeMode mode = DecodeMode::Tree;
  spec::TreeParams tree;            // expansion parameters (mode Chain uses tree.draft_len and branch 1)
  bool collect_edges = false;       // keep verification edge records (for calibration)
};

struct GenerationStats {
  int rounds = 0;
  int target_forwards = 0;          // including the prefill
  int generated_tokens = 0;
  int accepted_draft_tokens = 0;
  long tree_nodes = 0;              // draft nodes over all rounds (root excluded)
  double prefill_ms = 0, draft_ms = 0, expand_ms = 0, verify_ms = 0, total_ms = 0;
  std::vector<long> accepted_at_depth;  // [block_size + 1]: rounds whose accepted path reached depth d
  double tokens_per_round() const { return rounds ? double(accepted_draft_tokens + rounds) / rounds : 0; }
  double mean_tree_size() const { return rounds ? double(tree_nodes) / rounds : 0; }
};

struct GenerationResult {
  std::vector<int32_t> ids;  // generated tokens (stop token included when one ended the generation)
  std::string finish_reason; // "stop", "length"
  GenerationStats stats;
  std::vector<spec::EdgeRecord> edges;  // with collect_edges
};

class Generator {
 public:
  // drafter may be null (then only DecodeMode::None works).
  Generator(TargetModel& target, Drafter* drafter, spec::Calibration calibration = {});

  // on_token(id) is called for every generated token as soon as it is final.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                            const std::function<void(int32_t)>& on_token = nullptr);

 private:
  TargetModel& target_;
  Drafter* drafter_;
  spec::Calibration calibration_;
};

}  // namespace ts
