#include "model/random_checkpoint.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"

namespace ts {

namespace {

void make_dirs(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!path.empty()) ::mkdir(path.c_str(), 0755);
    }
    if (i < dir.size()) path += dir[i];
  }
  struct stat st;
  TS_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "cannot create folder ", dir);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  TS_CHECK(out.good(), "cannot write ", path);
  out << text;
}

class Writer {
 public:
  Writer(DType dtype, uint64_t seed) : dtype_(dtype), rng_(seed) {}

  // Gaussian N(mean, std^2) entries.
  void add(const std::string& name, std::vector<int64_t> shape, float std, float mean = 0.0f) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::normal_distribution<float> dist(mean, std);
    io::TensorToWrite t{name, dtype_, std::move(shape), {}};
    t.bytes.resize(size_t(n) * dtype_size(dtype_));
    for (int64_t i = 0; i < n; ++i) {
      float v = dist(rng_);
      if (dtype_ == DType::F32) {
        std::memcpy(&t.bytes[i * 4], &v, 4);
      } else {
        uint16_t h = dtype_ == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(&t.bytes[i * 2], &h, 2);
      }
    }
    tensors_.push_back(std::move(t));
  }

  // A transformer layer under `prefix`. Projections ~ N(0, 1/fan_in) keep activations O(1).
  void add_layer(const std::string& p, int H, int heads, int kv_heads, int hd, int I, bool qk_norm, bool bias) {
    const float s_in = 1.0f / std::sqrt(float(H));
    add(p + "input_layernorm.weight", {H}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {H}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {heads * hd, H}, s_in);
    add(p + "self_attn.k_proj.weight", {kv_heads * hd, H}, s_in);
    add(p + "self_attn.v_proj.weight", {kv_heads * hd, H}, s_in);
    add(p + "self_attn.o_proj.weight", {H, heads * hd}, 0.5f / std::sqrt(float(heads * hd)));
    if (bias) {
      add(p + "self_attn.q_proj.bias", {heads * hd}, 0.1f);
      add(p + "self_attn.k_proj.bias", {kv_heads * hd}, 0.1f);
      add(p + "self_attn.v_proj.bias", {kv_heads * hd}, 0.1f);
    }
    if (qk_norm) {
      add(p + "self_attn.q_norm.weight", {hd}, 0.1f, 1.0f);
      add(p + "self_attn.k_norm.weight", {hd}, 0.1f, 1.0f);
    }
    add(p + "mlp.gate_proj.weight", {I, H}, s_in);
    add(p + "mlp.up_proj.weight", {I, H}, s_in);
    add(p + "mlp.down_proj.weight", {H, I}, 0.5f / std::sqrt(float(I)));
  }

  void write(const std::string& path) { io::write_safetensors(path, tensors_, {{"format", "pt"}}); }

 private:
  DType dtype_;
  std::mt19937_64 rng_;
  std::vector<io::TensorToWrite> tensors_;
};

const char* torch_dtype_name(DType t) {
  return t == DType::BF16 ? "bfloat16" : t == DType::F16 ? "float16" : "float32";
}

// The RoPE object in Hugging Face spelling: "rope_type" plus the parameters the type uses.
nlohmann::json rope_params_json(const RopeConfig& r) {
  nlohmann::json j;
  j["rope_type"] = rope_type_name(r.type);
  if (r.type != RopeType::Default) j["factor"] = r.factor;
  if (r.type == RopeType::Llama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.type == RopeType::Llama3 || r.type == RopeType::Yarn)
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.type == RopeType::Yarn) {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    if (r.attention_factor > 0) j["attention_factor"] = r.attention_factor;
  }
  return j;
}

void check_rope(const RopeConfig& r) {
  TS_CHECK(r.theta > 0, "random checkpoint: the RoPE base must be positive, got ", r.theta);
  TS_CHECK(r.type == RopeType::Default || r.type == RopeType::Linear || r.original_max_position_embeddings > 0,
           "random checkpoint: ", rope_type_name(r.type), " RoPE needs original_max_position_embeddings");
}

}  // namespace

std::string model_config_json(const ModelConfig& c, DType dtype) {
  nlohmann::json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = c.architecture == "Qwen3ForCausalLM"   ? "qwen3"
                    : c.architecture == "Qwen2ForCausalLM" ? "qwen2"
                                                           : "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  // transformers 4.x spelling (as Qwen3 / Qwen2.5 / Llama-3.1 folders are published): rope_theta + rope_scaling.
  check_rope(c.rope);
  j["rope_theta"] = c.rope.theta;
  j["rope_scaling"] = c.rope.type == RopeType::Default ? nlohmann::json(nullptr) : rope_params_json(c.rope);
  j["max_position_embeddings"] = c.max_position_embeddings;  // as given (not re-derived: write fresh configs only)
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = torch_dtype_name(dtype);
  if (c.architecture == "LlamaForCausalLM") j["attention_bias"] = c.qkv_bias;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_ids[0])
                                                                               : nlohmann::json(c.eos_token_ids);
  return j.dump(2) + "\n";
}

std::string drafter_config_json(const DrafterConfig& c) {
  nlohmann::json j;
  j["architectures"] = {"DSparkDrafter"};
  j["block_size"] = c.block_size;
  j["markov_rank"] = c.markov_rank;
  if (c.markov_rank > 0) j["markov_head_type"] = c.markov_head_type;
  j["target_layer_ids"] = c.target_layer_ids;
  j["mask_token_id"] = c.mask_token_id;
  j["num_hidden_layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  j["head_dim"] = c.head_dim;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["rms_norm_eps"] = c.rms_norm_eps;
  // transformers v5 spelling, as the published DSpark drafters are saved: rope_parameters, no top-level rope_theta.
  check_rope(c.rope);
  nlohmann::json rope = rope_params_json(c.rope);
  rope["rope_theta"] = c.rope.theta;
  j["rope_parameters"] = rope;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

void write_random_model(const std::string& dir, const ModelConfig& c, DType dtype, uint64_t seed) {
  make_dirs(dir);
  Writer w(dtype, seed);
  // Embedding entries ~ N(0, 4/hidden): the normed residual stream (O(1) entries) against them gives logits of
  // standard deviation ~2, peaked but not one-hot, also when the head is tied to the embedding.
  w.add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, 2.0f / std::sqrt(float(c.hidden_size)));
  for (int l = 0; l < c.num_layers; ++l)
    w.add_layer(cat("model.layers.", l, "."), c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                c.intermediate_size, c.qk_norm, c.qkv_bias);
  w.add("model.norm.weight", {c.hidden_size}, 0.1f, 1.0f);
  if (!c.tie_word_embeddings) w.add("lm_head.weight", {c.vocab_size, c.hidden_size}, 2.0f / std::sqrt(float(c.hidden_size)));
  w.write(dir + "/model.safetensors");
  write_text(dir + "/config.json", model_config_json(c, dtype));
}

void write_random_drafter(const std::string& dir, const DrafterConfig& c, DType dtype, uint64_t seed) {
  make_dirs(dir);
  Writer w(dtype, seed);
  const int H = c.hidden_size, V = c.vocab_size;
  TS_CHECK(c.target_hidden_size > 0, "write_random_drafter: set target_hidden_size (the target's hidden size)");
  const int fc_in = int(c.target_layer_ids.size()) * c.target_hidden_size;
  w.add("embed_tokens.weight", {V, H}, 2.0f / std::sqrt(float(H)));
  w.add("fc.weight", {H, fc_in}, 1.0f / std::sqrt(float(fc_in)));
  w.add("hidden_norm.weight", {H}, 0.1f, 1.0f);
  for (int l = 0; l < c.num_layers; ++l)
    w.add_layer(cat("layers.", l, "."), H, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, true, false);
  w.add("norm.weight", {H}, 0.1f, 1.0f);
  w.add("lm_head.weight", {V, H}, 2.0f / std::sqrt(float(H)));
  if (c.markov_rank > 0) {  // markov_rank 0: a drafter without a Markov head (DFlash-style)
    w.add("markov_head.markov_w1.weight", {V, c.markov_rank}, 1.0f / std::sqrt(float(c.markov_rank)));
    w.add("markov_head.markov_w2.weight", {V, c.markov_rank}, 1.0f);
  }
  w.write(dir + "/model.safetensors");
  write_text(dir + "/config.json", drafter_config_json(c));
}

ModelConfig tiny_qwen3_config(int vocab, int hidden, int layers) {
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = hidden * 2;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.rms_norm_eps = 1e-6f;
  c.rope.theta = 10000.0;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = true;
  c.qk_norm = true;
  return c;
}

DrafterConfig tiny_drafter_config(int vocab, int hidden, int layers, int block) {
  DrafterConfig d;
  d.block_size = block;
  d.markov_rank = 4;
  d.target_layer_ids = {0, layers - 1};
  d.mask_token_id = vocab - 1;
  d.num_layers = 1;
  d.hidden_size = hidden;
  d.target_hidden_size = hidden;
  d.head_dim = 16;
  d.num_heads = 4;
  d.num_kv_heads = 2;
  d.intermediate_size = hidden * 2;
  d.vocab_size = vocab;
  return d;
}

}  // namespace ts
