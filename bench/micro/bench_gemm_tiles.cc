// Micro benchmark of the bf16 GEMM register tiles alone (gemm-inl.h compiled into this file for avx2, and into
// bench_gemm_tiles_avx512.cc for avx512, run where the CPU has it): MAC/ns of each R rows x P panels tile over one
// 64-column group whose weights sit in L1 or L2, no memory stream, no threads. It is what chose the avx2 tile family (3 x 3, 6 x 2, halves in turn); rerun it on a new CPU (Zen 3,
// Intel) before changing the family, and check a change against weights streamed from DRAM too (bench_linear):
// a 3-row call kept 3 x 2, whose 4 passes overlap the stream better. Best of 15 interleaved rounds.
//   bench_gemm_tiles [k pairs per call: 32 (8 KiB, L1) | 256 (64 KiB, L2)]
// Figures from earlier hosts: docs/benchmarks.md, "Micro benchmark figures kept from source comments".
#include <algorithm>
#include <cstdlib>

#include "gemm_tiles_timer.h"
#include "core/cpu.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/gemm-inl.h"

namespace ts::bench_tiles {
void bench_avx512_tiles(int pairs);  // bench_gemm_tiles_avx512.cc
}

int main(int argc, char** argv) {
  using namespace ts::kernels::cpu::avx2;
  using ts::bench_tiles::Candidate;
  const int pairs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 256;
  if (!ts::isa_supported(ts::Isa::Avx2)) {
    std::printf("bench_gemm_tiles: this CPU has no AVX2 + FMA\n");
    return 0;
  }
  // The family in use, then shapes it does not use (for comparison on other CPUs).
  const Candidate candidates[] = {
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
  ts::bench_tiles::time_tiles("avx2", kPanels, kW, candidates, int(sizeof(candidates) / sizeof(candidates[0])), pairs);
  ts::bench_tiles::bench_avx512_tiles(pairs);
  return 0;
}
