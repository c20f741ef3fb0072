// A linear layer y = x W^T with weights packed once at load into the column-group layout (kernels/cpu/gemm_packed.h)
// that every ISA variant's GEMM reads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant.h"

namespace ts::kernels {

namespace cpu {
struct QuantizedRows;
}  // namespace cpu

class Linear {
 public:
  // weight: [out_features, in_features] row-major as stored by Hugging Face, of dtype F32, F16 or BF16.
  // compute: BF16 (weights kept in bf16, activations rounded to bf16, f32 accumulation) or F32.
  // F16 weights are converted at load to the compute type.
  Linear();  // empty until assigned
  Linear(const void* weight, DType weight_dtype, int out_features, int in_features, DType compute);
  // Quantized: weight as above, quantized row by row to `quant` (ref::quantize_row's bytes: round to nearest), or
  // `blocks` already in that format ([out_features rows][in_features / 32 blocks], e.g. from a GGUF file).
  // Q8_0 and Q4_0, in_features a multiple of 32. The product quantizes each activation row in 32-value blocks
  // and runs integer dot products (kernels/cpu/qgemm.h): every ISA variant gives the same bits.
  Linear(const void* weight, DType weight_dtype, int out_features, int in_features, QuantType quant);
  static Linear from_blocks(const void* blocks, QuantType quant, int out_features, int in_features);
  // Quantized parts [rows_i, in] stacked along the output dimension, each in its own format (a fused q/k/v product
  // whose v a Q4_K_M mix keeps in Q6_K): y[r] = [part 0's outputs | part 1's | ...]. The activations are quantized
  // once; each part's outputs are bit for bit its own forward's. A single part is returned as it is.
  static Linear stacked(std::vector<Linear> parts);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;

  // x: [rows, in_features] f32 -> y: [rows, out_features] f32. Any rows >= 1.
  // Runs the active ISA variant's GEMM (core/cpu.h). Within a variant, a row's output never depends on the other
  // rows, on `rows` or on the thread count (bit-identical for every batch shape). avx2 and avx512 give the same
  // bits; avx512bf16 (vdpbf16ps, for bf16 compute) and scalar differ from them in the last bits.
  void forward(const float* x, int rows, float* y) const;
  // Only output columns [col_begin, col_end): y: [rows, col_end - col_begin], each value bit for bit forward()'s.
  // Where col_begin falls on a packed column group (64 float columns, 16 quantized; a stacked product's parts run
  // whole) only those groups are computed; elsewhere the whole product runs and the columns are copied out.
  void forward_columns(const float* x, int rows, int col_begin, int col_end, float* y) const;

  // y: [rows, down.out_features] = down(swiglu(gate_up(x))) for a gate_up whose outputs are [gate | up], I each, and
  // a down of I inputs: bit for bit forward(), swiglu_rows (ops.h) and down's forward() in turn. Where both products
  // are quantized and I is a multiple of 32, each thread computes the gate and up columns of its own 32-column
  // blocks, applies swiglu to them and quantizes them as down's input blocks, all in one parallel region: no thread
  // reads another's gate / up outputs, and only down's int8 input crosses between cores.
  static void swiglu_mlp(const Linear& gate_up, const Linear& down, const float* x, int rows, float* y);

  int out_features() const;
  int in_features() const;
  DType compute_type() const;  // F32 or BF16; F32 for quantized weights (the integer GEMM's output)
  bool quantized() const;
  QuantType quant_type() const;  // valid when quantized(); a stacked Linear's first part's
  const char* format_name() const;  // "bf16", "f32", "Q8_0", "Q4_0", ...; stacked: the parts', e.g. "Q4_K+Q6_K"
  size_t weight_bytes() const;  // bytes of packed weights streamed per forward
  const char* backend_name() const;  // the GEMM the active variant runs, e.g. "packed-avx2-bf16"

 private:
  struct Impl;
  // A quantized Linear of that shape with its packed weights allocated, not yet written.
  static Linear quantized_shell(QuantType quant, int out_features, int in_features);
  // Quantized: y from x already quantized in blocks (a stacked product: each part, then y).
  void forward_blocks(const cpu::QuantizedRows& acts, int rows, float* y) const;
  std::unique_ptr<Impl> impl_;
};

namespace ref {
// Scalar reference: y[r, o] = sum_i x[r, i] * w[o, i], where w and (for bf16 compute) x are rounded like Linear.
// This form takes x and w as they are (the caller rounds them); accumulation in double.
void linear(const float* x, const float* w_f32, float* y, int rows, int out_features, int in_features);
// Rounds x and w to bf16 first when compute is BF16 (as Linear does), then as above.
void linear(const float* x, const float* w_f32, float* y, int rows, int out_features, int in_features, DType compute);
}  // namespace ref

}  // namespace ts::kernels
