// processed_distribution under every ISA variant this CPU runs: its double passes come from the active variant's
// kernel table (kernels/cpu/kernel_table.h), and they must give the same bits on each, so the target's p (and with
// it every sampled token) does not depend on TREESPARK_ISA.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "sampling/distribution.h"

namespace ts {
namespace {

TEST(ProcessedDistributionIsa, SameBitsOnEveryVariant) {
  const Isa saved = active_isa();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0, 6);
  std::vector<float> logits(5003);  // [vocab], odd length: the passes' vector tails
  for (float& v : logits) v = normal(rng);
  logits[10] = -std::numeric_limits<float>::infinity();
  logits[11] = -80;  // exponents far below the max: subnormal and zero probabilities
  const int vocab = int(logits.size());
  std::vector<SamplingParams> cases(4);  // temperature only, top-k, top-p, min-p
  for (SamplingParams& p : cases) p.temperature = 0.8f;
  cases[1].top_k = 40;
  cases[2].top_p = 0.9f;
  cases[3].min_p = 0.05f;
  for (const SamplingParams& params : cases) {
    set_isa(Isa::Scalar);
    std::vector<double> want;  // [vocab]
    processed_distribution(logits.data(), vocab, params, &want);
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      std::vector<double> got;  // [vocab]
      processed_distribution(logits.data(), vocab, params, &got);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(double)), 0)
          << isa_name(isa) << " top_k " << params.top_k << " top_p " << params.top_p << " min_p " << params.min_p;
    }
  }
  set_isa(saved);
}

}  // namespace
}  // namespace ts
