#include "model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/error.h"

namespace ts {

namespace {

struct ArchInfo {
  const char* gguf;  // general.architecture
  const char* hf;    // config.json "architectures"[0]
};
constexpr ArchInfo kArchs[] = {
    {"qwen3", "Qwen3ForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"llama", "LlamaForCausalLM"}};

const ArchInfo* find_arch(const std::string& gguf_arch) {
  for (const ArchInfo& a : kArchs)
    if (gguf_arch == a.gguf) return &a;
  return nullptr;
}

// A positive count that fits an int ("FILE: key 'K' must be positive, got V").
int positive_int(const io::GgufFile& f, const std::string& key) {
  const uint32_t v = f.get_u32(key);
  TS_CHECK(v > 0 && v < (1u << 31), f.path(), ": key '", key, "' must be a positive count, got ", v);
  return int(v);
}

int optional_int(const io::GgufFile& f, const std::string& key, int fallback) {
  return f.has(key) ? positive_int(f, key) : fallback;
}

// A float-valued key stored as F32 or F64 (llama.cpp writes F32).
double optional_double(const io::GgufFile& f, const std::string& key, double fallback) {
  return f.has(key) ? f.get_f64(key) : fallback;
}

int32_t optional_token_id(const io::GgufFile& f, const std::string& key) {
  if (!f.has(key)) return -1;
  const uint32_t id = f.get_u32(key);
  TS_CHECK(id < (1u << 31), f.path(), ": key '", key, "' is not a token id: ", id);
  return int32_t(id);
}

// The llama3 factor table for `r` (Hugging Face _compute_llama3_parameters, as the converter writes it).
std::vector<double> llama3_factors(const RopeConfig& r, int head_dim) {
  const double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
  const double high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
  std::vector<double> out;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double wavelen = 2 * std::numbers::pi * std::pow(r.theta, 2.0 * i / head_dim);
    if (wavelen < high_wavelen) {
      out.push_back(1.0);
    } else if (wavelen > low_wavelen) {
      out.push_back(r.factor);
    } else {
      const double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      out.push_back(1.0 / ((1 - smooth) / r.factor + smooth));
    }
  }
  return out;
}

// A value within 1e-3 (relative) of a multiple of `step` is snapped to it (float32 noise in the table).
double snap(double v, double step) {
  const double nice = std::round(v / step) * step;
  return std::abs(v - nice) <= 1e-3 * std::max(1.0, std::abs(v)) ? nice : v;
}

RopeConfig rope_from_gguf(const io::GgufFile& f, const std::string& arch, int head_dim, int context_length) {
  const std::string p = arch + ".rope.";
  RopeConfig r;
  r.theta = f.get_f64(p + "freq_base");
  TS_CHECK(r.theta > 0 && std::isfinite(r.theta), f.path(), ": key '", p, "freq_base' must be positive, got ",
           r.theta);
  // As llama.cpp reads it: the type defaults to "linear" and the factor (or the older scale_linear) to none.
  const std::string type = f.has(p + "scaling.type") ? f.get_string(p + "scaling.type") : "linear";
  double factor = optional_double(f, p + "scaling.factor", 0.0);
  if (!f.has(p + "scaling.factor")) factor = optional_double(f, p + "scale_linear", 0.0);
  const io::GgufTensor* freqs = f.find_tensor("rope_freqs.weight");

  if (freqs) {
    TS_CHECK(type == "none" || (type == "linear" && (factor == 0 || factor == 1)), f.path(),
             ": tensor 'rope_freqs.weight' (llama3 RoPE) together with rope.scaling.type '", type, "' factor ",
             factor, " is not supported");
    TS_CHECK(freqs->ggml_type == io::ggml_type::F32 && freqs->numel() == head_dim / 2, f.path(),
             ": tensor 'rope_freqs.weight' must be F32 with head_dim / 2 = ", head_dim / 2, " values, got ",
             io::ggml_type_name(freqs->ggml_type), " with ", freqs->numel());
    std::vector<float> values(size_t(freqs->numel()));
    std::memcpy(values.data(), freqs->data, values.size() * sizeof(float));
    return llama3_rope_from_factors(values, r.theta, head_dim, f.path());
  }
  if (type == "none" || (type == "linear" && (factor == 0 || factor == 1))) return r;
  if (type == "linear") {
    TS_CHECK(factor > 0 && std::isfinite(factor), f.path(), ": key '", p, "scaling.factor' must be positive, got ",
             factor);
    r.type = RopeType::Linear;
    r.factor = factor;
    return r;
  }
  TS_CHECK(type == "yarn", f.path(), ": unsupported RoPE scaling type '", type, "' in key '", p,
           "scaling.type' (supported: none, linear, yarn, and llama3 as tensor rope_freqs.weight)");
  TS_CHECK(factor > 0 && std::isfinite(factor), f.path(), ": yarn needs key '", p,
           "scaling.factor' (positive), got ", factor);
  r.type = RopeType::Yarn;
  r.factor = factor;
  r.original_max_position_embeddings = optional_int(f, p + "scaling.original_context_length", context_length);
  r.beta_fast = optional_double(f, p + "scaling.yarn_beta_fast", 32.0);
  r.beta_slow = optional_double(f, p + "scaling.yarn_beta_slow", 1.0);
  r.attention_factor = optional_double(f, p + "scaling.yarn_attn_factor", 0.0);
  const double ext = optional_double(f, p + "scaling.yarn_ext_factor", 1.0);
  TS_CHECK(ext == 1.0 || ext < 0, f.path(), ": key '", p, "scaling.yarn_ext_factor' = ", ext,
           " is not supported (Hugging Face yarn has no extrapolation factor)");
  const double log_mul = optional_double(f, p + "scaling.yarn_log_multiplier", 0.0);
  TS_CHECK(log_mul == 0.0, f.path(), ": key '", p, "scaling.yarn_log_multiplier' (mscale_all_dim) is not supported");
  TS_CHECK(r.beta_fast > r.beta_slow && r.beta_slow > 0 && r.attention_factor >= 0, f.path(),
           ": yarn needs beta_fast > beta_slow > 0 and attn_factor >= 0 (keys '", p, "scaling.yarn_*')");
  return r;
}

}  // namespace

RopeConfig llama3_rope_from_factors(const std::vector<float>& factors, double theta, int head_dim,
                                    const std::string& source) {
  TS_CHECK(head_dim > 0 && head_dim % 2 == 0 && factors.size() == size_t(head_dim / 2), source,
           ": rope_freqs.weight has ", factors.size(), " values for head_dim ", head_dim);
  RopeConfig r;
  r.theta = theta;
  float top = 0;
  for (float v : factors) {
    TS_CHECK(std::isfinite(v) && v > 0, source, ": rope_freqs.weight holds ", v, " (factors must be positive)");
    top = std::max(top, v);
  }
  if (std::abs(top - 1.0f) <= 1e-6f) return r;  // no scaling at all
  TS_CHECK(top > 1.0f, source, ": rope_freqs.weight factors are all below 1: not a llama3 table");
  r.type = RopeType::Llama3;
  r.factor = snap(double(top), 0.5);
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  // Entries: ones (high frequency), smooth, then `factor` (low frequency), in order of rising wavelength.
  const double rel = 1e-4;
  std::vector<std::pair<double, double>> smooth;  // (wavelength, s in (0, 1))
  double max_one_wavelen = 0, min_full_wavelen = INFINITY;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double wavelen = 2 * std::numbers::pi * std::pow(theta, 2.0 * i / head_dim);
    const double v = factors[size_t(i)];
    if (std::abs(v - 1.0) <= rel) {
      max_one_wavelen = wavelen;
    } else if (std::abs(v - r.factor) <= rel * r.factor) {
      min_full_wavelen = std::min(min_full_wavelen, wavelen);
    } else {
      smooth.emplace_back(wavelen, (1.0 / v - 1.0 / r.factor) / (1.0 - 1.0 / r.factor));
    }
  }
  double original = 0;
  if (smooth.size() >= 2) {  // L / w = 1 + s (h - 1) at both ends of the smooth band
    const auto [wa, sa] = smooth.front();
    const auto [wb, sb] = smooth.back();
    const double k = (wa - wb) / (wb * sb - wa * sa);
    TS_CHECK(std::isfinite(k) && k > 0, source, ": rope_freqs.weight is not a llama3 table (smooth band)");
    r.high_freq_factor = snap(1.0 + k, 0.5);
    original = wa * (1.0 + sa * (r.high_freq_factor - 1.0));
  } else if (smooth.size() == 1) {
    original = smooth[0].first * (1.0 + smooth[0].second * (r.high_freq_factor - 1.0));
  } else {
    // Any L with high * max_one_wavelen < L < min_full_wavelen gives this table; prefer a power of two.
    const double lo = r.high_freq_factor * max_one_wavelen, hi = min_full_wavelen;
    TS_CHECK(lo < hi, source, ": rope_freqs.weight is not a llama3 table (no cutoff fits)");
    original = std::exp2(std::ceil(std::log2(std::max(lo, 1.0))));
    if (!(original > lo && original < hi)) original = std::floor((lo + hi) / 2);
  }
  TS_CHECK(std::isfinite(original) && original >= 1 && original < double(1 << 30), source,
           ": rope_freqs.weight gives original context ", original, ": not a llama3 table");
  r.original_max_position_embeddings = int(std::lround(original));
  const std::vector<double> again = llama3_factors(r, head_dim);
  for (size_t i = 0; i < again.size(); ++i)
    TS_CHECK(std::abs(again[i] - factors[i]) <= 1e-3 * again[i], source, ": rope_freqs.weight[", i, "] = ",
             factors[i], " is not the llama3 schedule (factor ", r.factor, ", low 1, high ", r.high_freq_factor,
             ", original context ", r.original_max_position_embeddings, " gives ", again[i], ")");
  return r;
}

ModelConfig model_config_from_gguf(const io::GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const ArchInfo* info = find_arch(arch);
  TS_CHECK(info, f.path(), ": unsupported architecture '", arch,
           "' in key 'general.architecture' (supported: qwen3, qwen2, llama)");
  const std::string p = arch + ".";
  ModelConfig c;
  c.architecture = info->hf;
  c.hidden_size = positive_int(f, p + "embedding_length");
  c.intermediate_size = positive_int(f, p + "feed_forward_length");
  c.num_layers = positive_int(f, p + "block_count");
  c.num_heads = positive_int(f, p + "attention.head_count");
  c.num_kv_heads = optional_int(f, p + "attention.head_count_kv", c.num_heads);
  TS_CHECK(c.num_heads % c.num_kv_heads == 0, f.path(), ": attention.head_count (", c.num_heads,
           ") must be a multiple of attention.head_count_kv (", c.num_kv_heads, ")");
  c.head_dim = optional_int(f, p + "attention.key_length", c.hidden_size / c.num_heads);
  TS_CHECK(c.head_dim % 2 == 0, f.path(), ": key '", p, "attention.key_length' must be even for RoPE, got ",
           c.head_dim);
  for (const char* key : {"attention.value_length", "rope.dimension_count"}) {
    const int v = optional_int(f, p + key, c.head_dim);
    TS_CHECK(v == c.head_dim, f.path(), ": key '", p, key, "' = ", v, " differs from the head size ", c.head_dim,
             " (partial rotary and distinct value heads are not supported)");
  }
  c.rms_norm_eps = f.get_f32(p + "attention.layer_norm_rms_epsilon");
  TS_CHECK(c.rms_norm_eps > 0 && std::isfinite(c.rms_norm_eps), f.path(), ": key '", p,
           "attention.layer_norm_rms_epsilon' must be positive, got ", c.rms_norm_eps);
  const int context_length = positive_int(f, p + "context_length");
  c.rope = rope_from_gguf(f, arch, c.head_dim, context_length);
  // As config.cc derives the usable context.
  double usable = context_length;
  if (c.rope.type == RopeType::Yarn)
    usable = std::max(usable, double(c.rope.original_max_position_embeddings) * c.rope.factor);
  if (c.rope.type == RopeType::Linear && c.rope.factor > 1) usable *= c.rope.factor;
  c.max_position_embeddings = int(std::min(usable, double(1 << 30)));

  const io::GgufTensor& embed = f.tensor("token_embd.weight");
  TS_CHECK(embed.ne.size() == 2 && embed.cols() == c.hidden_size, f.path(), ": tensor 'token_embd.weight' must be [",
           c.hidden_size, ", vocab] (ne), got ", embed.ne.size(), " dims with ne[0] = ", embed.cols());
  TS_CHECK(embed.rows() > 0 && embed.rows() < (int64_t(1) << 31), f.path(), ": tensor 'token_embd.weight' has ",
           embed.rows(), " rows");
  c.vocab_size = int(embed.rows());
  if (f.has(p + "vocab_size"))
    TS_CHECK(positive_int(f, p + "vocab_size") == c.vocab_size, f.path(), ": key '", p, "vocab_size' = ",
             f.get_u32(p + "vocab_size"), " but token_embd.weight has ", c.vocab_size, " rows");
  if (f.has("tokenizer.ggml.tokens"))
    TS_CHECK(f.array_size("tokenizer.ggml.tokens") <= uint64_t(c.vocab_size), f.path(),
             ": key 'tokenizer.ggml.tokens' lists ", f.array_size("tokenizer.ggml.tokens"),
             " tokens, more than the ", c.vocab_size, " rows of token_embd.weight");

  c.tie_word_embeddings = !f.has_tensor("output.weight");
  c.qk_norm = arch == "qwen3";
  c.qkv_bias = arch == "qwen2" || f.has_tensor("blk.0.attn_q.bias");
  c.bos_token_id = optional_token_id(f, "tokenizer.ggml.bos_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = optional_token_id(f, key);
    if (id >= 0 && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(id);
  }
  return c;
}

// --- tensor names ----------------------------------------------------------------------------------------------

namespace {

struct LayerName {
  const char* gguf;  // after "blk.N."
  const char* hf;    // after "model.layers.N."
  bool llama_qk;     // permuted for arch llama
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight", false},
    {"ffn_norm.weight", "post_attention_layernorm.weight", false},
    {"attn_q.weight", "self_attn.q_proj.weight", true},
    {"attn_q.bias", "self_attn.q_proj.bias", true},
    {"attn_k.weight", "self_attn.k_proj.weight", true},
    {"attn_k.bias", "self_attn.k_proj.bias", true},
    {"attn_v.weight", "self_attn.v_proj.weight", false},
    {"attn_v.bias", "self_attn.v_proj.bias", false},
    {"attn_output.weight", "self_attn.o_proj.weight", false},
    {"attn_output.bias", "self_attn.o_proj.bias", false},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", false},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", false},
    {"ffn_gate.weight", "mlp.gate_proj.weight", false},
    {"ffn_up.weight", "mlp.up_proj.weight", false},
    {"ffn_down.weight", "mlp.down_proj.weight", false},
};
constexpr std::pair<const char*, const char*> kTopNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// "PREFIX<digits>.REST" -> (digits, REST); false when `name` does not have that form.
bool split_layer(const std::string& name, const std::string& prefix, std::string& index, std::string& rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot - prefix.size() > 9) return false;
  index = name.substr(prefix.size(), dot - prefix.size());
  if (!std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) return false;
  if (index.size() > 1 && index[0] == '0') return false;  // one spelling per layer
  rest = name.substr(dot + 1);
  return true;
}

}  // namespace

std::optional<GgufTensorMapping> gguf_tensor_to_hf(const std::string& gguf_name, const std::string& gguf_arch) {
  if (!find_arch(gguf_arch)) return std::nullopt;
  for (const auto& [g, hf] : kTopNames)
    if (gguf_name == g) return GgufTensorMapping{hf, GgufRowOrder::Same};
  if (gguf_name == "rope_freqs.weight" && gguf_arch == "llama") return GgufTensorMapping{"", GgufRowOrder::Same};
  std::string index, rest;
  if (!split_layer(gguf_name, "blk.", index, rest)) return std::nullopt;
  for (const LayerName& n : kLayerNames) {
    if (rest != n.gguf) continue;
    const bool permuted = n.llama_qk && gguf_arch == "llama";
    return GgufTensorMapping{"model.layers." + index + "." + n.hf,
                             permuted ? GgufRowOrder::LlamaRopeQK : GgufRowOrder::Same};
  }
  return std::nullopt;
}

std::optional<std::string> hf_tensor_to_gguf(const std::string& hf_name) {
  for (const auto& [g, hf] : kTopNames)
    if (hf_name == hf) return std::string(g);
  std::string index, rest;
  if (!split_layer(hf_name, "model.layers.", index, rest)) return std::nullopt;
  for (const LayerName& n : kLayerNames)
    if (rest == n.hf) return "blk." + index + "." + n.gguf;
  return std::nullopt;
}

// --- Llama Q/K row permutation ---------------------------------------------------------------------------------

int64_t llama_rope_hf_row_to_gguf_row(int64_t hf_row, int64_t head_dim) {
  TS_DCHECK(head_dim > 0 && head_dim % 2 == 0 && hf_row >= 0, "head_dim ", head_dim, " row ", hf_row);
  const int64_t half = head_dim / 2;
  const int64_t head = hf_row / head_dim, within = hf_row % head_dim;
  const int64_t j = within / half, i = within % half;  // HF row j * half + i
  return head * head_dim + 2 * i + j;
}

int64_t llama_rope_gguf_row_to_hf_row(int64_t gguf_row, int64_t head_dim) {
  TS_DCHECK(head_dim > 0 && head_dim % 2 == 0 && gguf_row >= 0, "head_dim ", head_dim, " row ", gguf_row);
  const int64_t half = head_dim / 2;
  const int64_t head = gguf_row / head_dim, within = gguf_row % head_dim;
  const int64_t i = within / 2, j = within % 2;  // GGUF row 2i + j
  return head * head_dim + j * half + i;
}

void llama_rope_unpermute_rows(const uint8_t* gguf_rows, uint8_t* hf_rows, int64_t rows, size_t row_bytes,
                               int64_t head_dim) {
  TS_CHECK(head_dim > 0 && head_dim % 2 == 0, "llama Q/K rows: head_dim must be even and positive, got ", head_dim);
  TS_CHECK(rows >= 0 && rows % head_dim == 0, "llama Q/K rows: ", rows, " rows are not whole heads of ", head_dim);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(hf_rows + size_t(r) * row_bytes, gguf_rows + size_t(llama_rope_hf_row_to_gguf_row(r, head_dim)) * row_bytes,
                row_bytes);
}

}  // namespace ts
