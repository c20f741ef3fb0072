// Micro benchmark of the avx2 bf16 GEMM register tiles alone (gemm-inl.h compiled into this file): MAC/ns of
// each R rows x P panels tile over one 64-column group whose weights sit in L1 or L2, no memory stream, no
// threads. It is what chose the avx2 tile family (3 x 3, 6 x 2, halves in turn); rerun it on a new CPU (Zen 3,
// Intel) before changing the family, and check a change against weights streamed from DRAM too (bench_linear):
// a 3-row call kept 3 x 2, whose 4 passes overlap the stream better. Best of 15 interleaved rounds.
//   bench_gemm_tiles [k pairs per call: 32 (8 KiB, L1) | 256 (64 KiB, L2)]
// Zen 4 (family 25 model 17), ymm FMA peak ~59 MAC/ns, 256 pairs: 1x8 29-33, 2x4 38-47, 3x2 35-41, 3x3 43-48,
// 4x2 43-52, 5x2 48-56, 6x2 48-57.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/cpu.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/gemm-inl.h"

namespace {

using namespace ts::kernels::cpu;
using namespace ts::kernels::cpu::avx2;

struct Candidate {
  const char* name;
  int rows, panels;
  TileFn<uint16_t> fn, rest;  // rest: the group's last pass when `panels` does not divide kPanels
};

// The family in use, then shapes it does not use (for comparison on other CPUs).
const Candidate kCandidates[] = {
    {"1x8 panels outer (used)", 1, 8, tile_bf16<1, 8, true>, nullptr},
    {"2x4 panels outer (used)", 2, 4, tile_bf16<2, 4, true>, nullptr},
    {"3x3 + 3x2 (used in 6+ rows)", 3, 3, tile_bf16<3, 3, false>, tile_bf16<3, 2, false>},
    {"4x2 (used)", 4, 2, tile_bf16<4, 2, false>, nullptr},
    {"5x2 (used)", 5, 2, tile_bf16<5, 2, false>, nullptr},
    {"6x2 (used)", 6, 2, tile_bf16<6, 2, false>, nullptr},
    {"2x4 rows outer", 2, 4, tile_bf16<2, 4, false>, nullptr},
    {"3x2 (used for 3 rows)", 3, 2, tile_bf16<3, 2, false>, nullptr},
    {"3x2 panels outer", 3, 2, tile_bf16<3, 2, true>, nullptr},
    {"4x3 + 4x2", 4, 3, tile_bf16<4, 3, false>, tile_bf16<4, 2, false>},
    {"7x2", 7, 2, tile_bf16<7, 2, false>, nullptr},
    {"8x1", 8, 1, tile_bf16<8, 1, false>, nullptr},
};

}  // namespace

int main(int argc, char** argv) {
  if (!ts::isa_supported(ts::Isa::Avx2)) {
    std::printf("bench_gemm_tiles: this CPU has no AVX2 + FMA\n");
    return 0;
  }
  const int pairs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 256;
  std::vector<uint16_t> w(size_t(pairs) * kGroupCols * 2 + 4096);  // [pairs][64 cols][2] bf16 + slack
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint16_t(0x3f80 + i % 7);
  std::vector<float> x(size_t(8) * pairs * 2, 0.5f);  // [8 rows][2 pairs] bf16 values as f32
  std::vector<float> y(size_t(8) * kGroupCols);       // [8 rows][64 cols]
  constexpr int kCount = sizeof(kCandidates) / sizeof(kCandidates[0]);
  std::vector<double> best_ns(kCount, 1e30);
  for (int round = 0; round < 15; ++round)
    for (int c = 0; c < kCount; ++c) {
      const Candidate& t = kCandidates[c];
      const int calls = std::max(1, 200000 / pairs);
      const auto t0 = std::chrono::steady_clock::now();
      for (int call = 0; call < calls; ++call)
        for (int p0 = 0; p0 < kPanels; p0 += t.panels)
          (t.rest && p0 + t.panels > kPanels ? t.rest : t.fn)(x.data(), pairs * 2, w.data() + p0 * kW * 2, pairs,
                                                             y.data() + p0 * kW, kGroupCols, kGroupCols - p0 * kW,
                                                             call == 0, nullptr, 0, 0);
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      best_ns[c] = std::min(best_ns[c], ns / calls);
    }
  std::printf("avx2 bf16 tiles, one 64-column group, %d k pairs per call (%d KiB of weights); MAC/ns, best of 15\n",
              pairs, pairs * kGroupCols * 4 / 1024);
  for (int c = 0; c < kCount; ++c) {
    const Candidate& t = kCandidates[c];
    const int passes = (kPanels + t.panels - 1) / t.panels;
    const int computed = t.rest ? kPanels : passes * t.panels;  // panels of work per group, wasted ones included
    const double useful_macs = double(t.rows) * kGroupCols * pairs * 2;
    std::printf("  %-26s %5.1f MAC/ns%s\n", t.name, useful_macs / best_ns[c],
                computed > kPanels ? " (computes panels past the group: not usable as is)" : "");
  }
  return 0;
}
