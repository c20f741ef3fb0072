// A target's tensors read from a GGUF file by their Hugging Face names (model/gguf_model.h maps the names and
// restores the rows llama.cpp's converter permuted), as a LayerSource for load_layer.
//
// Formats: F32, F16 and BF16 tensors are read as floats and take the load's WeightPlan (so --quantize applies;
// quantized_by_plan() counts them, and TargetModel::load says when a requested format applied to none);
// Q8_0, Q4_0, Q4_K and Q6_K tensors run as stored on the integer GEMM. A fused product (q/k/v, gate/up) whose
// parts are stored in different quantized formats (llama.cpp's Q4_K_M gives attn_v Q6_K beside Q4_K q and k) is a
// stacked Linear of its parts, each as stored. Only a product mixing float and quantized parts is dequantized and
// quantized again, to the most precise of its parts' formats: lossy, and said in the load log.
// Any other tensor type is refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/layer.h"

namespace ts {

class GgufWeights {
 public:
  GgufWeights(const io::GgufFile& file, int head_dim);

  LayerSource layer_source() const;
  bool has(const std::string& hf_name) const;
  std::vector<float> vector(const std::string& hf_name, int64_t n) const;  // [n] as f32
  kernels::Linear linear(const std::vector<std::string>& hf_names, const std::vector<int64_t>& rows, int64_t in,
                         const WeightPlan& plan, MatrixRole role) const;
  // The embedding table [vocab, hidden]: a float table in place in the mapping; a quantized one dequantized and
  // rounded to bf16 into `owned` (a table of a 150k vocabulary would be ~1 GB as f32).
  io::TensorRef embedding(int64_t vocab, int64_t hidden, std::vector<uint16_t>* owned) const;
  // Fused products re-quantized because their parts' formats differed (see above).
  const std::vector<std::string>& requantized() const { return requantized_; }
  // Float products the plan quantized (so far): 0 where every matrix was stored quantized and ran as stored.
  int quantized_by_plan() const { return quantized_by_plan_; }

 private:
  const io::GgufTensor& find(const std::string& hf_name, int64_t rows, int64_t cols) const;
  // One product of parts stacked along the output dimension, in one format: the stored one when every part is
  // quantized alike, else floats in the plan's format (a mix with quantized parts: re-quantized, see above).
  // first_name: the first part's Hugging Face name (the load log's).
  kernels::Linear linear_of_parts(const std::vector<const io::GgufTensor*>& parts, const std::string& first_name,
                                  const WeightPlan& plan, MatrixRole role) const;
  // The tensor's bytes in Hugging Face row order, written to out: [t.nbytes]. Straight from the mapping (one copy)
  // unless the rows must be un-permuted.
  void rows_in_hf_order(const io::GgufTensor& t, uint8_t* out) const;
  // The parts' bytes one after another, each in Hugging Face row order, in stacked_ (valid until the next call):
  // [sum of the parts' rows][row bytes].
  const uint8_t* stacked_rows(const std::vector<const io::GgufTensor*>& parts) const;
  // Its values as f32 in Hugging Face row order, written to out: [rows, cols].
  void rows_as_f32(const io::GgufTensor& t, float* out) const;
  std::vector<float> rows_as_f32(const io::GgufTensor& t) const;  // [rows, cols]

  const io::GgufFile& file_;
  std::string arch_;
  int head_dim_;
  mutable std::vector<std::string> requantized_;
  mutable int quantized_by_plan_ = 0;
  // Fused products' parts are stacked here before packing: one buffer for every layer, so its pages are faulted in
  // once (on a VM fresh pages cost about as much as the copy).
  mutable std::vector<uint8_t> stacked_;
};

}  // namespace ts
