// How a request decodes: the one mode enum, from the command line and the HTTP request to tree expansion.
#pragma once

namespace ts {

enum class DecodeMode {
  None,      // plain decoding: the target alone, no drafter work
  Chain,     // a chain of draft_len nodes, one child each (calibrated p_hat orders nothing: one child per node)
  Tree,      // TreeSpark: a best-first tree by calibrated path survival
  LogQ,      // a best-first tree by q (uncalibrated), an ablation
  Marginal,  // a best-first tree by the drafter's per-position marginal softmax(U), DDTree-style
};

// A draft tree of any priority (not plain decoding, not a chain).
inline bool is_tree(DecodeMode m) { return m == DecodeMode::Tree || m == DecodeMode::LogQ || m == DecodeMode::Marginal; }

// Whether expansion ranks this mode's nodes by the calibrated p_hat (and so whether refitting the calibration on
// verification labels changes anything): Tree and Chain; LogQ and Marginal rank by q.
inline bool reads_calibration(DecodeMode m) { return m == DecodeMode::Tree || m == DecodeMode::Chain; }

}  // namespace ts
