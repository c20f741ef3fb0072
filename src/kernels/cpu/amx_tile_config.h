// Internal: the AMX tile configuration that LDTILECFG reads (palette 1), shared by the bf16 GEMM (gemm_amx.cc) and
// the quantized one (qgemm_amx.cc); each fills in its own tiles' shapes.
#pragma once

#include <cstdint>

namespace ts::kernels::cpu {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile i
  uint8_t rows[16] = {};    // rows of tile i
};
static_assert(sizeof(AmxTileConfig) == 64, "LDTILECFG reads 64 bytes");

}  // namespace ts::kernels::cpu
