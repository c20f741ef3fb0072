// TEST ONLY: expansion with a lossy admission rule, the negative control of the losslessness tests.
//
// keep_draw is called with the q of each sampled draw AFTER it is made; false discards the draw and closes its
// parent's slot. Admission then reads its own draw, which breaks rule 1 of docs/verification.md: the
// exact-enumeration and statistical tests use it to show that they detect such a rule. Nothing outside tests/
// includes this header.
#pragma once

#include <functional>

#include "spec_decode/expand.h"

namespace ts::spec_decode {

DraftTree expand_peeking_at_draws(const DraftSource& source, int32_t anchor, const TreeParams& params,
                                  const Calibration& calibration, Chooser& chooser,
                                  const std::function<bool(double drawn_q)>& keep_draw);

}  // namespace ts::spec_decode
