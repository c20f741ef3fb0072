// The pairs the engine's per-request-edit tests run on (logit edits, penalties): a random tiny pair, and the
// shipped pair when models/ holds it; and the decoding modes they compare, with one tree shape.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "engine/generator.h"
#include "engine/model_bundle.h"
#include "engine/tiny_pair.h"

namespace ts::testing {

struct Subject {
  std::string name;
  Pair pair;              // random tiny pair, or the shipped one
  spec_decode::Calibration calibration;
  std::vector<std::vector<int32_t>> prompts;
};

inline std::vector<Subject> subjects() {
  std::vector<Subject> out;
  Subject tiny{"random pair", make_pair(/*vocab=*/20, /*hidden=*/32, /*layers=*/2, /*block=*/7, DType::BF16, 11),
               spec_decode::Calibration{1.3, 0.4}, {{1, 5, 2, 9}, {3, 3, 6, 0, 17, 4, 12}}};
  out.push_back(std::move(tiny));
  const std::string dir = std::string(TS_SOURCE_DIR) + "/models/";
  if (file_exists(dir + "treespark-target/config.json")) {
    ModelBundle bundle = ModelBundle::load(dir + "treespark-target", dir + "treespark-drafter");
    std::vector<std::vector<int32_t>> prompts;
    for (const char* text : {"def fibonacci(n):\n", "import os\nimport sys\n\n"})
      prompts.push_back(bundle.prompt_ids({}, text, false, false));
    Subject shipped{"shipped pair", Pair{std::move(bundle.target), std::move(bundle.drafter)},
                    bundle.calibration.lookup(0), prompts};
    out.push_back(std::move(shipped));
  }
  return out;
}

inline GenerateOptions with_mode(GenerateOptions o, DecodeMode mode) {
  o.mode = mode;
  o.tree.theta = 0.02;
  o.tree.node_cap = 16;
  o.tree.branch_cap = 3;
  o.tree.draft_len = 4;
  return o;
}

inline constexpr DecodeMode kModes[] = {DecodeMode::None, DecodeMode::Chain, DecodeMode::Tree};

}  // namespace ts::testing
