#include "decode_flags.h"

#include <sstream>

#include "core/cpu.h"
#include "core/error.h"

namespace ts::cli {

void DecodeFlags::add_sampling(CLI::App& app) {
  app.add_option("--temperature", temperature, "sampling temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "nucleus sampling mass (1 = off)");
  app.add_option("--min-p", min_p, "drop tokens below min-p x the top probability (0 = off)");
  app.add_option("--seed", seed, "random seed");
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  app.add_option("--max-context", max_context, "context limit, prompt included")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads (0 = all)");
}

void DecodeFlags::add_spec(CLI::App& app) {
  app.add_option("--mode", mode, "none (target only) | chain | tree")
      ->check(CLI::IsMember({"none", "chain", "tree"}));
  app.add_option("--priority", priority,
                 "tree priority: calibrated (TreeSpark) | logq (uncalibrated) | marginal (per-position U, DDTree-style)")
      ->check(CLI::IsMember({"calibrated", "logq", "marginal"}));
  app.add_option("--theta", theta, "stop growing when the best candidate's survival < theta (default 0.05)");
  app.add_option("--node-cap", node_cap, "max draft nodes per round")->check(CLI::PositiveNumber);
  app.add_option("--branch-cap", branch_cap, "max children per node")->check(CLI::PositiveNumber);
  app.add_option("--draft-len", draft_len, "chain length (default: block_size - 1)");
  app.add_flag("--adaptive-theta", adaptive,
               "price each node with the target's cost curve L(b, k), measured at start-up (load-adaptive theta)");
  app.add_option("--load-batch", load_batch, "batch size the adaptive theta assumes (serving load)")
      ->check(CLI::PositiveNumber);
}

void DecodeFlags::apply_threads(size_t weight_bytes) const {
  set_num_threads(threads > 0 ? threads : default_threads_for(weight_bytes));
}

GenerateOptions DecodeFlags::options(int block_size) const {
  GenerateOptions o;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.min_p = min_p;
  o.sampling.seed = seed;
  o.max_new_tokens = max_tokens;
  o.max_context = max_context;
  o.mode = mode == "none" ? DecodeMode::None : mode == "chain" ? DecodeMode::Chain : DecodeMode::Tree;
  spec::TreeParams& t = o.tree;
  t.mode = priority == "marginal" ? spec::TreeMode::Marginal
           : priority == "logq"   ? spec::TreeMode::LogQ
                                  : spec::TreeMode::Tree;
  t.theta = theta >= 0 ? theta : 0.05;
  t.node_cap = node_cap;
  t.branch_cap = branch_cap;
  t.draft_len = draft_len > 0 ? draft_len : std::max(1, block_size - 1);
  if (o.mode == DecodeMode::Chain) t.node_cap = t.draft_len;
  return o;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string s = text;
  for (char& c : s)
    if (c == ',' || c == '\n' || c == '\t' || c == '[' || c == ']') c = ' ';
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (...) {
      used = 0;
    }
    TS_CHECK(used == tok.size() && v >= 0 && v < (1LL << 31), "bad token id '", tok, "' (expected a non-negative integer)");
    ids.push_back(int32_t(v));
  }
  return ids;
}

}  // namespace ts::cli
