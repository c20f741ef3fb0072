#include "spec_decode/round.h"

#include <cstring>
#include <utility>

#include "core/error.h"

namespace ts::spec_decode {

Round::Round(DraftedBlock block) : block_(std::move(block)) {
  TS_CHECK(block_.vocab > 0 && block_.block_size >= 1 && block_.base_logits != nullptr,
           "round: a drafted block needs vocab > 0, block_size >= 1 and base logits, got ", block_.vocab, ", ",
           block_.block_size);
  source_.vocab = block_.vocab;
  source_.block_size = block_.block_size;
  // Both functions read block_ through `this`: a Round is not copied or moved once drafted.
  source_.base_logits = [this](int depth, float* out) {
    std::memcpy(out, &block_.base_logits[size_t(depth - 1) * block_.vocab], sizeof(float) * block_.vocab);
    if (block_.edit) block_.edit(depth, out);
  };
  source_.conditional_logits = [this](int depth, int32_t parent, float* out) {
    std::memcpy(out, &block_.base_logits[size_t(depth - 1) * block_.vocab], sizeof(float) * block_.vocab);
    if (block_.add_markov_bias) block_.add_markov_bias(parent, out);
    if (block_.edit) block_.edit(depth, out);
  };
}

void Round::draft(int32_t anchor, const TreeParams& params, const Calibration& calibration, Chooser& chooser,
                  const RoundCost& round_cost) {
  tree_ = expand(source_, anchor, params, calibration, chooser, round_cost);
}

RoundOutcome Round::finish(const float* target_rows, const SamplingParams& sampling, Chooser& chooser) const {
  TS_CHECK(tree_.size() >= 1, "round: finish() before draft()");
  VerifyResult vr = verify(tree_, target_rows, sampling, source_, chooser);
  RoundOutcome out;
  out.kept_nodes.push_back(0);
  out.kept_nodes.insert(out.kept_nodes.end(), vr.accepted_nodes.begin(), vr.accepted_nodes.end());
  for (int32_t node : out.kept_nodes) out.kept_depths.push_back(tree_.depth[size_t(node)]);
  // Accepted node i came from the row of its parent, kept_nodes[i]; the bonus from the deepest accepted node.
  for (size_t i = 0; i < vr.accepted_nodes.size(); ++i)
    out.emitted.push_back({tree_.token[size_t(vr.accepted_nodes[i])], out.kept_nodes[i]});
  out.emitted.push_back({vr.bonus_token, vr.last_node});
  out.draft_nodes = tree_.size() - 1;
  out.accepted = int(vr.accepted_nodes.size());
  for (int node = 1; node < tree_.size(); ++node) out.predicted += tree_.survival[size_t(node)];
  out.edges = std::move(vr.edges);
  return out;
}

}  // namespace ts::spec_decode
