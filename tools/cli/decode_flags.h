// Flags shared by generate, calibrate and bench spec: sampling and speculative-decoding parameters.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/generator.h"

namespace ts::cli {

struct DecodeFlags {
  float temperature = 0, top_p = 1, min_p = 0;
  int top_k = 0;
  uint64_t seed = 0;
  int max_tokens = 64;
  int max_context = 4096;
  std::string mode = "tree";         // none | chain | tree
  std::string priority = "calibrated";  // calibrated | logq | marginal
  double theta = -1;                 // < 0: the documented default for the mode
  int node_cap = 32, branch_cap = 4, draft_len = -1;
  bool adaptive = false;
  int load_batch = 1;                // the serving load the adaptive theta prices nodes for
  int threads = 0;

  void add_sampling(CLI::App& app);
  void add_spec(CLI::App& app);
  // Sets the thread count: --threads, else default_threads_for(the model's weight bytes).
  void apply_threads(size_t weight_bytes) const;
  // Builds generation options; block_size bounds the chain length default.
  GenerateOptions options(int block_size) const;
};

std::vector<int32_t> parse_ids(const std::string& text);  // "1,2,3" or "1 2 3"

}  // namespace ts::cli
