#include "model/layer.h"

#include <cstring>
#include <memory>

#include "core/error.h"
#include "kernels/ops.h"

namespace ts {

std::vector<float> load_vector(const io::Checkpoint& ckpt, const std::string& name, int64_t n) {
  return io::to_f32(ckpt.weight(name, {n}));
}

namespace {

kernels::Linear make_linear(const void* data, DType dtype, int64_t rows, int64_t in, const WeightPlan& plan,
                            MatrixRole role) {
  if (const auto quant = plan.quant_for(role, int(in))) return kernels::Linear(data, dtype, int(rows), int(in), *quant);
  return kernels::Linear(data, dtype, int(rows), int(in), plan.compute);
}

// Parts the plan stores in one format, stacked into one product.
kernels::Linear load_same_format(const io::Checkpoint& ckpt, const std::vector<std::string>& names,
                                 const std::vector<int64_t>& rows, int64_t in, const WeightPlan& plan, MatrixRole role,
                                 std::vector<uint8_t>* stack_scratch) {
  int64_t total_rows = 0;
  for (auto r : rows) total_rows += r;
  if (names.size() == 1) {
    const io::TensorRef& t = ckpt.weight(names[0], {rows[0], in});
    return make_linear(t.data, t.dtype, rows[0], in, plan, role);
  }
  // Stack the parts. Same dtype everywhere: copy raw bytes (keeps bf16 compact); else go through f32.
  std::vector<const io::TensorRef*> parts;
  bool same_dtype = true;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(&ckpt.weight(names[i], {rows[i], in}));
    same_dtype = same_dtype && parts.back()->dtype == parts[0]->dtype;
  }
  if (same_dtype) {
    std::vector<uint8_t> local;
    std::vector<uint8_t>& stacked = stack_scratch ? *stack_scratch : local;  // [total_rows, in] of the parts' dtype
    size_t bytes = 0;
    for (auto* p : parts) bytes += p->nbytes;
    if (stacked.size() < bytes) stacked.resize(bytes);
    size_t at = 0;
    for (auto* p : parts) {
      std::memcpy(stacked.data() + at, p->data, p->nbytes);
      at += p->nbytes;
    }
    return make_linear(stacked.data(), parts[0]->dtype, total_rows, in, plan, role);
  }
  std::vector<float> stacked;  // [total_rows, in]
  for (auto* p : parts) {
    auto f = io::to_f32(*p);
    stacked.insert(stacked.end(), f.begin(), f.end());
  }
  return make_linear(stacked.data(), DType::F32, total_rows, in, plan, role);
}

}  // namespace

kernels::Linear load_linear(const io::Checkpoint& ckpt, const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t in, DType compute) {
  return load_linear(ckpt, names, rows, in, WeightPlan{compute}, MatrixRole::AttnOut);
}

kernels::Linear load_linear(const io::Checkpoint& ckpt, const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t in, const WeightPlan& plan, MatrixRole role,
                            std::vector<uint8_t>* stack_scratch) {
  TS_CHECK(names.size() == rows.size() && !names.empty(), "load_linear: names/rows mismatch");
  // Consecutive parts in one format are packed together; parts the plan stores in different formats (q4_k_m's v
  // in Q6_K beside q and k in Q4_K) make a stacked product of those runs.
  std::vector<int> formats;  // [parts]: the planned QuantType's id, or -1 for the float GEMM
  for (size_t i = 0; i < names.size(); ++i) {
    const auto quant = plan.quant_for(part_role(role, i), int(in));
    formats.push_back(quant ? int(*quant) : -1);
  }
  const std::vector<size_t> bounds = format_runs(formats);
  std::vector<kernels::Linear> runs;
  for (size_t r = 0; r + 1 < bounds.size(); ++r)
    runs.push_back(load_same_format(ckpt, {names.begin() + bounds[r], names.begin() + bounds[r + 1]},
                                    {rows.begin() + bounds[r], rows.begin() + bounds[r + 1]}, in, plan,
                                    part_role(role, bounds[r]), stack_scratch));
  return kernels::Linear::stacked(std::move(runs));
}

LayerWeights load_layer(const io::Checkpoint& ckpt, const std::string& prefix, const LayerShape& shape,
                        DType compute) {
  return load_layer(ckpt, prefix, shape, WeightPlan{compute});
}

LayerWeights load_layer(const io::Checkpoint& ckpt, const std::string& prefix, const LayerShape& shape,
                        const WeightPlan& plan) {
  return load_layer(checkpoint_source(ckpt), prefix, shape, plan);
}

LayerSource checkpoint_source(const io::Checkpoint& ckpt) {
  LayerSource source;
  source.vector = [&ckpt](const std::string& name, int64_t n) { return load_vector(ckpt, name, n); };
  auto stack_scratch = std::make_shared<std::vector<uint8_t>>();  // shared by all layers, freed with the source
  source.linear = [&ckpt, stack_scratch](const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                                         int64_t in, const WeightPlan& p, MatrixRole role) {
    return load_linear(ckpt, names, rows, in, p, role, stack_scratch.get());
  };
  return source;
}

LayerWeights load_layer(const LayerSource& source, const std::string& prefix, const LayerShape& shape,
                        const WeightPlan& plan) {
  LayerWeights w;
  const int64_t H = shape.hidden, Q = shape.q_dim(), KV = shape.kv_dim(), I = shape.intermediate;
  w.input_norm = source.vector(prefix + "input_layernorm.weight", H);
  w.post_norm = source.vector(prefix + "post_attention_layernorm.weight", H);
  const std::string a = prefix + "self_attn.";
  w.qkv = source.linear({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, {Q, KV, KV}, H, plan,
                    MatrixRole::AttnQkv);
  if (shape.qkv_bias) {
    for (auto [name, n] : {std::pair{"q_proj.bias", Q}, {"k_proj.bias", KV}, {"v_proj.bias", KV}}) {
      auto b = source.vector(a + name, n);
      w.qkv_bias.insert(w.qkv_bias.end(), b.begin(), b.end());
    }
  }
  if (shape.qk_norm) {
    w.q_norm = source.vector(a + "q_norm.weight", shape.head_dim);
    w.k_norm = source.vector(a + "k_norm.weight", shape.head_dim);
  }
  w.o = source.linear({a + "o_proj.weight"}, {H}, Q, plan, MatrixRole::AttnOut);
  const std::string m = prefix + "mlp.";
  w.gate_up = source.linear({m + "gate_proj.weight", m + "up_proj.weight"}, {I, I}, H, plan,
                        MatrixRole::MlpGateUp);
  w.down = source.linear({m + "down_proj.weight"}, {H}, I, plan, MatrixRole::MlpDown);
  return w;
}

namespace {
// k_rows: [n, kv_dim] -> the k norm (where the model has one), then RoPE at positions [n].
void norm_and_rope_keys(const LayerWeights& w, const LayerShape& shape, const int32_t* positions, int n,
                        float* k_rows) {
  if (shape.qk_norm)
    kernels::rmsnorm(k_rows, w.k_norm.data(), k_rows, n * shape.kv_heads, shape.head_dim, shape.eps);
  kernels::rope(k_rows, positions, n, shape.kv_heads, shape.head_dim, shape.rope_inv_freq.data(),
                shape.rope_attention_scale);
}
}  // namespace

void project_qkv(const LayerWeights& w, const LayerShape& shape, const float* h, const int32_t* positions, int n,
                 LayerScratch& s, float* q_out, float* k_rows, float* v_rows) {
  const int Q = shape.q_dim(), KV = shape.kv_dim(), W = Q + 2 * KV;
  s.qkv.resize(size_t(n) * W);
  w.qkv.forward(h, n, s.qkv.data());
  for (int r = 0; r < n; ++r) {
    float* row = &s.qkv[size_t(r) * W];  // [q | k | v]
    if (!w.qkv_bias.empty())
      for (int i = 0; i < W; ++i) row[i] += w.qkv_bias[i];
    std::memcpy(q_out + size_t(r) * Q, row, sizeof(float) * Q);
    std::memcpy(k_rows + size_t(r) * KV, row + Q, sizeof(float) * KV);
    std::memcpy(v_rows + size_t(r) * KV, row + Q + KV, sizeof(float) * KV);
  }
  if (shape.qk_norm) kernels::rmsnorm(q_out, w.q_norm.data(), q_out, n * shape.heads, shape.head_dim, shape.eps);
  kernels::rope(q_out, positions, n, shape.heads, shape.head_dim, shape.rope_inv_freq.data(),
                shape.rope_attention_scale);
  norm_and_rope_keys(w, shape, positions, n, k_rows);
}

void project_kv(const LayerWeights& w, const LayerShape& shape, const float* h, const int32_t* positions, int n,
                LayerScratch& s, float* k_rows, float* v_rows) {
  const int Q = shape.q_dim(), KV = shape.kv_dim();
  s.qkv.resize(size_t(n) * 2 * KV);
  w.qkv.forward_columns(h, n, Q, Q + 2 * KV, s.qkv.data());
  for (int r = 0; r < n; ++r) {
    float* row = &s.qkv[size_t(r) * 2 * KV];  // [k | v]
    if (!w.qkv_bias.empty())
      for (int i = 0; i < 2 * KV; ++i) row[i] += w.qkv_bias[Q + i];
    std::memcpy(k_rows + size_t(r) * KV, row, sizeof(float) * KV);
    std::memcpy(v_rows + size_t(r) * KV, row + KV, sizeof(float) * KV);
  }
  norm_and_rope_keys(w, shape, positions, n, k_rows);
}

void attn_out_residual(const LayerWeights& w, const LayerShape& shape, const float* attn, float* x, int n,
                       LayerScratch& s) {
  s.proj.resize(size_t(n) * shape.hidden);
  w.o.forward(attn, n, s.proj.data());
  kernels::add(x, s.proj.data(), int64_t(n) * shape.hidden);
}

void mlp_residual(const LayerWeights& w, const LayerShape& shape, float* x, int n, LayerScratch& s) {
  const int H = shape.hidden;
  s.h.resize(size_t(n) * H);
  kernels::rmsnorm(x, w.post_norm.data(), s.h.data(), n, H, shape.eps);
  s.proj.resize(size_t(n) * H);
  kernels::Linear::swiglu_mlp(w.gate_up, w.down, s.h.data(), n, s.proj.data());
  kernels::add(x, s.proj.data(), int64_t(n) * H);
}

}  // namespace ts
