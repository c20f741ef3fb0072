// Internal: the per-ISA kernel builds, declared once per ISA namespace for the dispatchers, and the avx512bf16
// extras. Definitions: ops_<isa>.cc, attention_<isa>.cc, gemm_<isa>.cc, each compiling the one shared source
// (*-inl.h) for its vector layer. The per-ISA files do not include this header: their definitions carry target
// attributes, and GCC would read a plain declaration next to them as another version of the function.
#pragma once

#include <cstdint>

namespace ts::kernels::cpu {

namespace avx2 {
#include "kernels/cpu/simd_kernels.inc"
}  // namespace avx2

namespace avx512 {
#include "kernels/cpu/simd_kernels.inc"
}  // namespace avx512

namespace avx512bf16 {
// x: [rows, in] f32 -> x_bits: [rows, k_padded] bf16 bits (zero padding column); 4-byte aligned.
void convert_rows_to_bf16(const float* x, int rows, int in_features, uint16_t* x_bits);
void gemm_bf16(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features, int in_features);
}  // namespace avx512bf16

namespace amx {
// Needs CpuFeatures::amx_bf16 (which includes the OS's permission, asked for by core/cpu.cc).
// x_bits as avx512bf16::convert_rows_to_bf16 writes them.
void gemm_bf16(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features, int in_features);
}  // namespace amx

}  // namespace ts::kernels::cpu
