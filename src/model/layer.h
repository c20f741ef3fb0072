// One pre-norm transformer layer of the Qwen3 / Qwen2 / Llama shape, shared by the target and the drafter:
//   x += o_proj(attention(rope(qk_norm(qkv_proj(input_norm(x))))))
//   x += down_proj(silu(gate_proj(h)) * up_proj(h)),  h = post_attention_norm(x)
// q/k/v and gate/up are fused into one packed product each: fewer calls matter for small models.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/kv_cache.h"
#include "model/weight_plan.h"

namespace ts {

struct LayerShape {
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  float eps = 1e-6f;
  bool qk_norm = false;
  bool qkv_bias = false;
  std::vector<float> rope_inv_freq;  // [head_dim / 2], from the model's RoPE type (kernels::rope)
  float rope_attention_scale = 1.0f;
  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
};

struct LayerWeights {
  std::vector<float> input_norm;      // [hidden]
  std::vector<float> post_norm;       // [hidden]
  kernels::Linear qkv;                // [q_dim + 2 kv_dim, hidden]
  std::vector<float> qkv_bias;        // [q_dim + 2 kv_dim], empty without bias
  std::vector<float> q_norm, k_norm;  // [head_dim], empty without q/k norm
  kernels::Linear o;                  // [hidden, q_dim]
  kernels::Linear gate_up;            // [2 intermediate, hidden]
  kernels::Linear down;               // [hidden, intermediate]
};

// Loads "<prefix>self_attn.q_proj.weight" etc. compute: BF16 or F32 (see kernels::Linear); or per the plan.
LayerWeights load_layer(const io::Checkpoint& ckpt, const std::string& prefix, const LayerShape& shape, DType compute);
LayerWeights load_layer(const io::Checkpoint& ckpt, const std::string& prefix, const LayerShape& shape,
                        const WeightPlan& plan);
// Where a layer's tensors come from, by their Hugging Face names (a safetensors checkpoint, a GGUF file).
struct LayerSource {
  std::function<std::vector<float>(const std::string& name, int64_t n)> vector;  // [n] as f32
  // Parts [rows_i, in] stacked along the output dimension, in the plan's (or the file's own) format.
  std::function<kernels::Linear(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t in,
                                const WeightPlan& plan, MatrixRole role)>
      linear;
};
LayerSource checkpoint_source(const io::Checkpoint& ckpt);  // ckpt must outlive the source
LayerWeights load_layer(const LayerSource& source, const std::string& prefix, const LayerShape& shape,
                        const WeightPlan& plan);

// A float vector tensor of exactly `n` elements, as f32.
std::vector<float> load_vector(const io::Checkpoint& ckpt, const std::string& name, int64_t n);
// A linear layer from one or more [rows_i, in] tensors stacked along the output dimension.
kernels::Linear load_linear(const io::Checkpoint& ckpt, const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t in, DType compute);
// stack_scratch: where parts of one dtype are stacked before packing; a caller loading many layers passes one buffer
// for all, so its pages are faulted in once (fresh pages cost about as much as the copy on a VM).
kernels::Linear load_linear(const io::Checkpoint& ckpt, const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t in, const WeightPlan& plan, MatrixRole role,
                            std::vector<uint8_t>* stack_scratch = nullptr);

// Scratch buffers reused across layers and calls (resized on demand).
struct LayerScratch {
  std::vector<float> h;        // [n, hidden]
  std::vector<float> qkv;      // [n, q_dim + 2 kv_dim]
  std::vector<float> proj;     // [n, hidden]
};

// Projects h: [n, hidden] (already normed) to q: [n, q_dim] and k, v: [n, kv_dim] each, with bias, q/k norm and
// RoPE at `positions` [n] applied. q goes to q_out, k and v to k_rows and v_rows ([n, kv_dim] each: the caller
// points them at the cache rows they belong in).
void project_qkv(const LayerWeights& w, const LayerShape& shape, const float* h, const int32_t* positions, int n,
                 LayerScratch& s, float* q_out, float* k_rows, float* v_rows);
// project_qkv's k and v alone (a drafter's context rows need no queries): only the fused product's k/v columns
// are computed, with the same bits.
void project_kv(const LayerWeights& w, const LayerShape& shape, const float* h, const int32_t* positions, int n,
                LayerScratch& s, float* k_rows, float* v_rows);

// x: [n, hidden] += MLP(post_norm(x)).
void mlp_residual(const LayerWeights& w, const LayerShape& shape, float* x, int n, LayerScratch& s);

// x: [n, hidden] += o_proj(attn): attn [n, q_dim].
void attn_out_residual(const LayerWeights& w, const LayerShape& shape, const float* attn, float* x, int n,
                       LayerScratch& s);

}  // namespace ts
