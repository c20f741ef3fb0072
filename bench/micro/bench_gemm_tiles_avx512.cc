// The avx512 candidates of bench_gemm_tiles (gemm-inl.h compiled into this file for the 16-lane layer).
// The tiles in use ran at the FMA peak on the Xeon measured, so what a 16-row call loses to its compute floor is
// the overlap of the weight stream with the arithmetic, not the tile (docs/benchmarks.md, "Micro benchmark figures
// kept from source comments").
#include "gemm_tiles_timer.h"
#include "core/cpu.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/gemm-inl.h"

namespace ts::bench_tiles {

void bench_avx512_tiles(int pairs) {
  using namespace ts::kernels::cpu::avx512;
  if (!ts::isa_supported(ts::Isa::Avx512)) {
    std::printf("bench_gemm_tiles: this CPU has no AVX-512, avx512 tiles skipped\n");
    return;
  }
  // The family in use (kBf16Wide up to 5 rows, kBf16Tall from 6), then shapes it does not use.
  const Candidate candidates[] = {
      {"1x4 (used)", 1, 4, tile_bf16<1, 4, false>, nullptr},
      {"2x4 (used)", 2, 4, tile_bf16<2, 4, false>, nullptr},
      {"4x4 (used)", 4, 4, tile_bf16<4, 4, false>, nullptr},
      {"5x4 (used)", 5, 4, tile_bf16<5, 4, false>, nullptr},
      {"6x2 (used)", 6, 2, tile_bf16<6, 2, false>, nullptr},
      {"8x2 (used)", 8, 2, tile_bf16<8, 2, false>, nullptr},
      {"8x2 panels outer", 8, 2, tile_bf16<8, 2, true>, nullptr},
      {"4x4 panels outer", 4, 4, tile_bf16<4, 4, true>, nullptr},
      {"6x4", 6, 4, tile_bf16<6, 4, false>, nullptr},
      {"12x2", 12, 2, tile_bf16<12, 2, false>, nullptr},
      {"8x1", 8, 1, tile_bf16<8, 1, false>, nullptr},
  };
  time_tiles("avx512", kPanels, kW, candidates, int(sizeof(candidates) / sizeof(candidates[0])), pairs);
}

}  // namespace ts::bench_tiles
