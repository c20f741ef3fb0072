#include "model/gguf_weights.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/quant.h"
#include "model/gguf_model.h"

namespace ts {

namespace {

bool float_type(uint32_t id, DType* out) {
  switch (id) {
    case io::ggml_type::F32: *out = DType::F32; return true;
    case io::ggml_type::F16: *out = DType::F16; return true;
    case io::ggml_type::BF16: *out = DType::BF16; return true;
  }
  return false;
}

// Finer formats first: the one a mixed fused product is re-quantized to.
int precision_rank(kernels::QuantType t) {
  switch (t) {
    case kernels::QuantType::Q8_0: return 4;
    case kernels::QuantType::Q6_K: return 3;
    case kernels::QuantType::Q4_K: return 2;
    case kernels::QuantType::Q4_0: return 1;
  }
  return 0;
}

}  // namespace

GgufWeights::GgufWeights(const io::GgufFile& file, int head_dim)
    : file_(file), arch_(file.get_string("general.architecture")), head_dim_(head_dim) {}

bool GgufWeights::has(const std::string& hf_name) const {
  const auto name = hf_tensor_to_gguf(hf_name);
  return name && file_.has_tensor(*name);
}

const io::GgufTensor& GgufWeights::find(const std::string& hf_name, int64_t rows, int64_t cols) const {
  const auto name = hf_tensor_to_gguf(hf_name);
  TS_CHECK(name, file_.path(), ": no GGUF name for tensor '", hf_name, "'");
  const io::GgufTensor& t = file_.tensor(*name);
  TS_CHECK(t.rows() == rows && t.cols() == cols, file_.path(), ": tensor '", t.name, "' is ",
           io::shape_to_string(t.row_major_shape()), " but the config needs [", rows, ", ", cols, "]");
  DType d;
  kernels::QuantType q;
  TS_CHECK(float_type(t.ggml_type, &d) || kernels::quant_type_from_id(t.ggml_type, &q), file_.path(), ": tensor '",
           t.name, "' has type ", io::ggml_type_name(t.ggml_type),
           ": supported are F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K");
  return t;
}

void GgufWeights::rows_in_hf_order(const io::GgufTensor& t, uint8_t* out) const {
  const auto mapping = gguf_tensor_to_hf(t.name, arch_);
  if (mapping && mapping->rows == GgufRowOrder::LlamaRopeQK) {
    llama_rope_unpermute_rows(t.data, out, t.rows(), t.row_bytes(), head_dim_);
  } else {
    std::memcpy(out, t.data, t.nbytes);
  }
}

void GgufWeights::rows_as_f32(const io::GgufTensor& t, float* out) const {
  // The mapped bytes are read in place unless the rows must be un-permuted first (llama's q/k).
  const auto mapping = gguf_tensor_to_hf(t.name, arch_);
  std::vector<uint8_t> unpermuted;
  const uint8_t* rows = t.data;
  if (mapping && mapping->rows == GgufRowOrder::LlamaRopeQK) {
    unpermuted.resize(t.nbytes);
    rows_in_hf_order(t, unpermuted.data());
    rows = unpermuted.data();
  }
  const size_t n = size_t(t.numel());
  DType d;
  kernels::QuantType q;
  if (float_type(t.ggml_type, &d)) {
    if (d == DType::F32) {
      std::memcpy(out, rows, n * 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, rows + 2 * i, 2);
        out[i] = d == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
  } else {
    kernels::quant_type_from_id(t.ggml_type, &q);
    for (int64_t r = 0; r < t.rows(); ++r)
      kernels::ref::dequantize_row(q, rows + r * t.row_bytes(), out + r * t.cols(), t.cols());
  }
}

const uint8_t* GgufWeights::stacked_rows(const std::vector<const io::GgufTensor*>& parts) const {
  size_t bytes = 0;
  for (const io::GgufTensor* t : parts) bytes += t->nbytes;
  if (stacked_.size() < bytes) stacked_.resize(bytes);
  size_t at = 0;
  for (const io::GgufTensor* t : parts) {
    rows_in_hf_order(*t, stacked_.data() + at);
    at += t->nbytes;
  }
  return stacked_.data();
}

std::vector<float> GgufWeights::rows_as_f32(const io::GgufTensor& t) const {
  std::vector<float> out(size_t(t.numel()));
  rows_as_f32(t, out.data());
  return out;
}

std::vector<float> GgufWeights::vector(const std::string& hf_name, int64_t n) const {
  const auto name = hf_tensor_to_gguf(hf_name);
  TS_CHECK(name, file_.path(), ": no GGUF name for tensor '", hf_name, "'");
  const io::GgufTensor& t = file_.tensor(*name);
  TS_CHECK(t.numel() == n, file_.path(), ": tensor '", t.name, "' has ", t.numel(), " values, the config needs ", n);
  return rows_as_f32(find(hf_name, t.rows(), t.cols()));
}

kernels::Linear GgufWeights::linear(const std::vector<std::string>& hf_names, const std::vector<int64_t>& rows,
                                    int64_t in, const WeightPlan& plan, MatrixRole role) const {
  std::vector<const io::GgufTensor*> parts;
  for (size_t i = 0; i < hf_names.size(); ++i) parts.push_back(&find(hf_names[i], rows[i], in));
  // Each part's format: a quantized tensor's own type (100 + id), else what the plan makes of the floats (a
  // QuantType's id, or -1: the float GEMM). Runs of consecutive parts in one format are packed together; when
  // every run is quantized but they differ (llama.cpp's Q4_K_M keeps v in Q6_K beside Q4_K q and k), the product
  // is a stacked Linear of the runs, each as stored.
  std::vector<int> formats;  // [parts]
  for (size_t i = 0; i < parts.size(); ++i) {
    kernels::QuantType q;
    if (kernels::quant_type_from_id(parts[i]->ggml_type, &q)) {
      formats.push_back(100 + int(parts[i]->ggml_type));
    } else {
      const auto planned = plan.quant_for(part_role(role, i), int(in));
      formats.push_back(planned ? int(*planned) : -1);
    }
  }
  const std::vector<size_t> bounds = format_runs(formats);
  const bool all_quantized = std::find(formats.begin(), formats.end(), -1) == formats.end();
  if (bounds.size() == 2 || !all_quantized) return linear_of_parts(parts, hf_names[0], plan, role);
  std::vector<kernels::Linear> runs;
  for (size_t r = 0; r + 1 < bounds.size(); ++r)
    runs.push_back(linear_of_parts({parts.begin() + bounds[r], parts.begin() + bounds[r + 1]}, hf_names[bounds[r]],
                                   plan, part_role(role, bounds[r])));
  return kernels::Linear::stacked(std::move(runs));
}

kernels::Linear GgufWeights::linear_of_parts(const std::vector<const io::GgufTensor*>& parts,
                                             const std::string& first_name, const WeightPlan& plan,
                                             MatrixRole role) const {
  const int64_t in = parts[0]->cols();
  int64_t total_rows = 0;
  bool all_same_quant = true, any_quant = false;
  kernels::QuantType widest = kernels::QuantType::Q4_0, first = kernels::QuantType::Q4_0;
  for (const io::GgufTensor* t : parts) {
    total_rows += t->rows();
    kernels::QuantType q;
    if (kernels::quant_type_from_id(t->ggml_type, &q)) {
      if (!any_quant) first = widest = q;
      all_same_quant = all_same_quant && q == first;
      if (precision_rank(q) > precision_rank(widest)) widest = q;
      any_quant = true;
    } else {
      all_same_quant = false;
    }
  }
  if (any_quant && all_same_quant && kernels::cpu::qgemm_supports(first) && in % kernels::block_values(first) == 0) {
    return kernels::Linear::from_blocks(stacked_rows(parts), first, int(total_rows), int(in));
  }
  // Float parts of one type keep it: one tensor in Hugging Face row order is packed straight from the mapping (GGUF
  // aligns tensor data to at least 32 bytes), several are stacked as raw rows into one uninitialised buffer; Linear
  // converts to the compute type while packing. Mixed types (or a quantized part of a mixed product) go through one
  // f32 buffer. No zero-filled buffers, no intermediate copies: a large file's load is mostly these passes.
  DType only = DType::F32;
  bool same_float = !any_quant && float_type(parts[0]->ggml_type, &only);
  for (const io::GgufTensor* t : parts) {
    DType d;
    same_float = same_float && float_type(t->ggml_type, &d) && d == only;
  }
  const void* values = nullptr;  // [total_rows, in] of `only`
  std::unique_ptr<float[]> widened;
  const auto mapping = gguf_tensor_to_hf(parts[0]->name, arch_);
  if (same_float && parts.size() == 1 && !(mapping && mapping->rows == GgufRowOrder::LlamaRopeQK) &&
      reinterpret_cast<uintptr_t>(parts[0]->data) % dtype_size(only) == 0) {
    values = parts[0]->data;
  } else if (same_float) {
    values = stacked_rows(parts);
  } else {
    only = DType::F32;
    widened.reset(new float[size_t(total_rows) * size_t(in)]);
    size_t at = 0;
    for (const io::GgufTensor* t : parts) {
      rows_as_f32(*t, widened.get() + at);
      at += size_t(t->numel());
    }
    values = widened.get();
  }
  if (any_quant) {
    requantized_.push_back(first_name);
    return kernels::Linear(values, only, int(total_rows), int(in), widest);
  }
  if (const auto quant = plan.quant_for(role, int(in))) {
    ++quantized_by_plan_;
    return kernels::Linear(values, only, int(total_rows), int(in), *quant);
  }
  return kernels::Linear(values, only, int(total_rows), int(in), plan.compute);
}

io::TensorRef GgufWeights::embedding(int64_t vocab, int64_t hidden, std::vector<uint16_t>* owned) const {
  const io::GgufTensor& t = find("model.embed_tokens.weight", vocab, hidden);
  io::TensorRef ref;
  ref.name = t.name;
  ref.shape = {vocab, hidden};
  ref.file = file_.path();
  if (float_type(t.ggml_type, &ref.dtype)) {
    ref.data = t.data;
    ref.nbytes = t.nbytes;
    return ref;
  }
  // A quantized table is widened to bf16 rows (what the lookup reads), row by row on the kernels' threads: a 150k
  // vocabulary is ~1e8 values, too many for one thread at load.
  kernels::QuantType q;
  kernels::quant_type_from_id(t.ggml_type, &q);
  owned->resize(size_t(vocab) * size_t(hidden));  // [vocab, hidden] bf16 bits
  kernels::cpu::parallel_ranges(vocab, vocab * hidden >= (int64_t(1) << 22), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(hidden));  // [hidden]
    for (int64_t r = r0; r < r1; ++r) {
      kernels::ref::dequantize_row(q, t.data + r * t.row_bytes(), row.data(), hidden);
      uint16_t* out = owned->data() + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) out[i] = f32_to_bf16(row[size_t(i)]);
    }
  });
  ref.dtype = DType::BF16;
  ref.data = reinterpret_cast<const uint8_t*>(owned->data());
  ref.nbytes = owned->size() * 2;
  return ref;
}

LayerSource GgufWeights::layer_source() const {
  LayerSource s;
  s.vector = [this](const std::string& name, int64_t n) { return vector(name, n); };
  s.linear = [this](const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t in,
                    const WeightPlan& plan, MatrixRole role) { return linear(names, rows, in, plan, role); };
  return s;
}

}  // namespace ts
