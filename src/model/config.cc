#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"

namespace ts {

namespace {

using nlohmann::json;

json parse_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    TS_FAIL(source, ": invalid JSON: ", e.what());
  }
  TS_CHECK(j.is_object(), source, ": expected a JSON object at the top level");
  return j;
}

int get_int(const json& j, const char* key, const std::string& source, int fallback, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    TS_CHECK(!required, source, ": missing required key '", key, "'");
    return fallback;
  }
  TS_CHECK(it->is_number_integer(), source, ": '", key, "' must be an integer, got ", it->dump());
  int64_t v = it->get<int64_t>();
  TS_CHECK(v >= 0 && v < (int64_t(1) << 31), source, ": '", key, "' out of range: ", v);
  return int(v);
}

float get_float(const json& j, const char* key, const std::string& source, float fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  TS_CHECK(it->is_number(), source, ": '", key, "' must be a number, got ", it->dump());
  return it->get<float>();
}

bool get_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  TS_CHECK(it->is_boolean(), source, ": '", key, "' must be true or false, got ", it->dump());
  return it->get<bool>();
}

void check_positive(int v, const char* key, const std::string& source) {
  TS_CHECK(v > 0, source, ": '", key, "' must be positive, got ", v);
}

// Token ids under `key`: an integer, a list of integers, or null / absent (no ids).
std::vector<int32_t> parse_token_ids(const json& j, const char* key, const std::string& source) {
  std::vector<int32_t> ids;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ids;
  auto one = [&](const json& e) {
    TS_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < (int64_t(1) << 31), source, ": '",
             key, "' must be a token id (non-negative integer) or a list of them, got ", it->dump());
    ids.push_back(e.get<int32_t>());
  };
  if (it->is_array()) {
    for (const auto& e : *it) one(e);
  } else {
    one(*it);
  }
  return ids;
}

// A number under `key` of the RoPE object `obj` (named `where` in messages); `fallback` when absent or null.
double rope_number(const json& obj, const char* key, const std::string& where, const std::string& source,
                   double fallback, bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    TS_CHECK(!required, source, ": '", where, ".", key, "' is required for this RoPE type");
    return fallback;
  }
  TS_CHECK(it->is_number(), source, ": '", where, ".", key, "' must be a number, got ", it->dump());
  return it->get<double>();
}

// Where a config keeps its RoPE type and parameters: the object (null: unscaled, legacy spelling) and its name in
// messages.
struct RopeObject {
  const json* obj = nullptr;
  std::string where;
};

// The RoPE base into r.theta, from 'rope_parameters.rope_theta' (v5 spelling; a top-level 'rope_theta' must agree)
// or the top-level 'rope_theta' (legacy, with an optional 'rope_scaling'); returns the object holding the type.
RopeObject parse_rope_base(const json& j, const std::string& source, RopeConfig& r) {
  auto params = j.find("rope_parameters");
  auto scaling = j.find("rope_scaling");
  auto top_theta = j.find("rope_theta");
  const bool v5 = params != j.end() && !params->is_null();
  const bool legacy_scaling = scaling != j.end() && !scaling->is_null();
  RopeObject o;
  if (v5) {
    TS_CHECK(params->is_object(), source, ": 'rope_parameters' must be an object, got ", params->dump());
    TS_CHECK(!legacy_scaling, source, ": both 'rope_parameters' and 'rope_scaling' are set; expected one");
    o.obj = &*params;
    o.where = "rope_parameters";
    auto t = params->find("rope_theta");
    TS_CHECK(t != params->end() && !t->is_null(), source,
             ": missing RoPE base 'rope_parameters.rope_theta' (per-layer-type RoPE parameters are not supported)");
    TS_CHECK(t->is_number(), source, ": 'rope_parameters.rope_theta' must be a number, got ", t->dump());
    r.theta = t->get<double>();
    if (top_theta != j.end() && !top_theta->is_null())
      TS_CHECK(top_theta->is_number() && top_theta->get<double>() == r.theta, source, ": 'rope_theta' ",
               top_theta->dump(), " disagrees with 'rope_parameters.rope_theta' ", t->dump());
  } else {
    TS_CHECK(top_theta != j.end() && !top_theta->is_null(), source,
             ": missing RoPE base: neither 'rope_theta' nor 'rope_parameters.rope_theta' is given");
    TS_CHECK(top_theta->is_number(), source, ": 'rope_theta' must be a number, got ", top_theta->dump());
    r.theta = top_theta->get<double>();
    if (legacy_scaling) {
      TS_CHECK(scaling->is_object(), source, ": 'rope_scaling' must be an object or null, got ", scaling->dump());
      o.obj = &*scaling;
      o.where = "rope_scaling";
    }
  }
  return o;
}

// The RoPE type named by 'rope_type' (or, older, 'type'); "default" when neither is set.
std::string rope_type_string(const RopeObject& o, const std::string& source) {
  for (const char* key : {"rope_type", "type"}) {
    auto t = o.obj->find(key);
    if (t == o.obj->end() || t->is_null()) continue;
    TS_CHECK(t->is_string(), source, ": '", o.where, ".", key, "' must be a string, got ", t->dump());
    return t->get<std::string>();
  }
  return "default";
}

double rope_param(const RopeObject& o, const char* key, const std::string& source, double fallback, bool required) {
  return rope_number(*o.obj, key, o.where, source, fallback, required);
}

// 'original_max_position_embeddings' as a positive integer (`fallback` when absent and not required).
int rope_original_max(const RopeObject& o, const std::string& source, bool required, int fallback) {
  const double v = rope_param(o, "original_max_position_embeddings", source, fallback, required);
  TS_CHECK(v >= 1 && v < double(1 << 30) && v == std::floor(v), source, ": '", o.where,
           ".original_max_position_embeddings' must be a positive integer, got ", v);
  return int(v);
}

void parse_llama3_rope(const RopeObject& o, const std::string& source, RopeConfig& r) {
  r.type = RopeType::Llama3;
  r.factor = rope_param(o, "factor", source, 1.0, true);
  r.low_freq_factor = rope_param(o, "low_freq_factor", source, 1.0, true);
  r.high_freq_factor = rope_param(o, "high_freq_factor", source, 4.0, true);
  r.original_max_position_embeddings = rope_original_max(o, source, true, 0);
  TS_CHECK(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0, source, ": '", o.where,
           "': llama3 needs 0 < low_freq_factor < high_freq_factor, got ", r.low_freq_factor, " and ",
           r.high_freq_factor);
}

void parse_yarn_rope(const RopeObject& o, const std::string& source, int max_position_embeddings, RopeConfig& r) {
  const json& obj = *o.obj;
  r.type = RopeType::Yarn;
  const bool has_orig = obj.contains("original_max_position_embeddings") &&
                        !obj["original_max_position_embeddings"].is_null();
  TS_CHECK(has_orig || max_position_embeddings > 0, source, ": '", o.where,
           "': yarn needs original_max_position_embeddings (or max_position_embeddings)");
  r.original_max_position_embeddings = rope_original_max(o, source, false, max_position_embeddings);
  // As transformers v5: an absent factor is the ratio of the extended to the original context.
  const bool has_factor = obj.contains("factor") && !obj["factor"].is_null();
  TS_CHECK(has_factor || (has_orig && max_position_embeddings > 0), source, ": '", o.where,
           ".factor' is required for this RoPE type");
  r.factor = has_factor ? rope_param(o, "factor", source, 1.0, true)
                        : double(max_position_embeddings) / r.original_max_position_embeddings;
  // Hugging Face reads these with `or`: 0 means the default as well.
  r.beta_fast = rope_param(o, "beta_fast", source, 32.0, false);
  r.beta_slow = rope_param(o, "beta_slow", source, 1.0, false);
  if (r.beta_fast == 0) r.beta_fast = 32.0;
  if (r.beta_slow == 0) r.beta_slow = 1.0;
  r.mscale = rope_param(o, "mscale", source, 0.0, false);
  r.mscale_all_dim = rope_param(o, "mscale_all_dim", source, 0.0, false);
  r.attention_factor = rope_param(o, "attention_factor", source, 0.0, false);
  TS_CHECK(r.attention_factor >= 0, source, ": '", o.where, ".attention_factor' must be positive");
  auto tr = obj.find("truncate");
  if (tr != obj.end() && !tr->is_null()) {
    TS_CHECK(tr->is_boolean(), source, ": '", o.where, ".truncate' must be true or false, got ", tr->dump());
    r.truncate = tr->get<bool>();
  }
  TS_CHECK(r.beta_fast > r.beta_slow && r.beta_slow > 0, source, ": '", o.where,
           "': yarn needs beta_fast > beta_slow > 0");
}

// RoPE from either spelling (see config.h). max_position_embeddings: the model's (0 = none in the file).
RopeConfig parse_rope(const json& j, const std::string& source, int max_position_embeddings) {
  RopeConfig r;
  const RopeObject o = parse_rope_base(j, source, r);
  TS_CHECK(r.theta > 0 && std::isfinite(r.theta), source, ": the RoPE base rope_theta must be positive, got ", r.theta);
  auto prf = j.find("partial_rotary_factor");
  const double partial = o.obj ? rope_param(o, "partial_rotary_factor", source, 1.0, false) : 1.0;
  TS_CHECK(partial == 1.0 && (prf == j.end() || prf->is_null() || (prf->is_number() && prf->get<double>() == 1.0)),
           source, ": partial rotary embeddings (partial_rotary_factor != 1) are not supported");
  if (!o.obj) return r;

  const std::string type = rope_type_string(o, source);
  if (type == "default") {
    r.type = RopeType::Default;
  } else if (type == "linear") {
    r.type = RopeType::Linear;
    r.factor = rope_param(o, "factor", source, 1.0, true);
  } else if (type == "llama3") {
    parse_llama3_rope(o, source, r);
  } else if (type == "yarn") {
    parse_yarn_rope(o, source, max_position_embeddings, r);
  } else {
    TS_FAIL(source, ": unsupported RoPE type '", type, "' in '", o.where,
            "' (supported: default, linear, llama3, yarn)");
  }
  TS_CHECK(r.factor > 0 && std::isfinite(r.factor), source, ": '", o.where, ".factor' must be positive, got ", r.factor);
  return r;
}

}  // namespace

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::Default: return "default";
    case RopeType::Linear: return "linear";
    case RopeType::Llama3: return "llama3";
    case RopeType::Yarn: return "yarn";
  }
  return "?";
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json j = parse_json(json_text, source);
  ModelConfig c;
  auto arch = j.find("architectures");
  TS_CHECK(arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string(), source,
           ": missing 'architectures' (expected e.g. [\"Qwen3ForCausalLM\"])");
  c.architecture = (*arch)[0].get<std::string>();
  const bool qwen3 = c.architecture == "Qwen3ForCausalLM";
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool llama = c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM";
  TS_CHECK(qwen3 || qwen2 || llama, source, ": unsupported architecture '", c.architecture,
           "' (supported: Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM)");

  c.vocab_size = get_int(j, "vocab_size", source, 0, true);
  c.hidden_size = get_int(j, "hidden_size", source, 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", source, 0, true);
  c.num_layers = get_int(j, "num_hidden_layers", source, 0, true);
  c.num_heads = get_int(j, "num_attention_heads", source, 0, true);
  check_positive(c.vocab_size, "vocab_size", source);
  check_positive(c.hidden_size, "hidden_size", source);
  check_positive(c.intermediate_size, "intermediate_size", source);
  check_positive(c.num_layers, "num_hidden_layers", source);
  check_positive(c.num_heads, "num_attention_heads", source);
  c.num_kv_heads = get_int(j, "num_key_value_heads", source, c.num_heads, false);
  check_positive(c.num_kv_heads, "num_key_value_heads", source);
  TS_CHECK(c.num_heads % c.num_kv_heads == 0, source, ": num_attention_heads (", c.num_heads,
           ") must be a multiple of num_key_value_heads (", c.num_kv_heads, ")");
  // Always read head_dim: Qwen3 sets it independently of hidden_size / heads.
  c.head_dim = get_int(j, "head_dim", source, c.hidden_size / c.num_heads, false);
  check_positive(c.head_dim, "head_dim", source);
  TS_CHECK(c.head_dim % 2 == 0, source, ": head_dim must be even for rotary embeddings, got ", c.head_dim);
  c.rms_norm_eps = get_float(j, "rms_norm_eps", source, 1e-6f);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 32768, false);
  check_positive(c.max_position_embeddings, "max_position_embeddings", source);
  c.rope = parse_rope(j, source, c.max_position_embeddings);
  // As vLLM derives the usable context: yarn extends the original context by its factor, linear scales the
  // configured one (Qwen2.5 with yarn keeps max_position_embeddings 32768 but is meant to run to 131072); llama3
  // configs already state the extended length.
  double usable = c.max_position_embeddings;
  if (c.rope.type == RopeType::Yarn)
    usable = std::max(usable, double(c.rope.original_max_position_embeddings) * c.rope.factor);
  if (c.rope.type == RopeType::Linear && c.rope.factor > 1) usable *= c.rope.factor;
  c.max_position_embeddings = int(std::min(usable, double(1 << 30)));
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);
  c.qk_norm = qwen3;
  c.qkv_bias = qwen2 || get_bool(j, "attention_bias", source, false);

  TS_CHECK(!get_bool(j, "use_sliding_window", source, false), source,
           ": sliding-window attention (use_sliding_window=true) is not supported");

  c.bos_token_id = get_int(j, "bos_token_id", source, -1, false);
  c.eos_token_ids = parse_token_ids(j, "eos_token_id", source);
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  TS_CHECK(file_exists(path), "no config.json in model folder ", model_dir);
  return parse_model_config(read_text_file(path), path);
}

DrafterConfig parse_drafter_config(const std::string& json_text, const std::string& source) {
  json j = parse_json(json_text, source);
  DrafterConfig c;
  c.block_size = get_int(j, "block_size", source, 0, true);
  c.markov_rank = get_int(j, "markov_rank", source, 0, false);
  auto mtype = j.find("markov_head_type");
  if (mtype != j.end() && !mtype->is_null()) {
    TS_CHECK(mtype->is_string(), source, ": 'markov_head_type' must be a string, got ", mtype->dump());
    c.markov_head_type = mtype->get<std::string>();
  }
  TS_CHECK(c.markov_head_type == "vanilla", source, ": markov_head_type '", c.markov_head_type,
           "' is not supported (only 'vanilla': logits + W2 * W1[parent]; 'gated' and 'rnn' heads are not)");
  c.mask_token_id = get_int(j, "mask_token_id", source, 0, true);
  c.num_layers = get_int(j, "num_hidden_layers", source, 0, true);
  c.hidden_size = get_int(j, "hidden_size", source, 0, true);
  c.num_heads = get_int(j, "num_attention_heads", source, 0, true);
  c.num_kv_heads = get_int(j, "num_key_value_heads", source, c.num_heads, false);
  c.head_dim = get_int(j, "head_dim", source, c.num_heads ? c.hidden_size / c.num_heads : 0, false);
  c.intermediate_size = get_int(j, "intermediate_size", source, 0, true);
  c.vocab_size = get_int(j, "vocab_size", source, 0, true);
  // Not a public key: only checked against the target at load (Drafter::load), 0 when absent.
  c.target_hidden_size = get_int(j, "target_hidden_size", source, 0, false);
  c.rms_norm_eps = get_float(j, "rms_norm_eps", source, 1e-6f);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 0, false);
  c.rope = parse_rope(j, source, c.max_position_embeddings);
  check_positive(c.block_size, "block_size", source);
  TS_CHECK(c.block_size >= 2, source, ": block_size must be at least 2 (anchor + one draft)");
  check_positive(c.num_layers, "num_hidden_layers", source);
  check_positive(c.hidden_size, "hidden_size", source);
  check_positive(c.num_heads, "num_attention_heads", source);
  check_positive(c.num_kv_heads, "num_key_value_heads", source);
  check_positive(c.head_dim, "head_dim", source);
  TS_CHECK(c.head_dim % 2 == 0, source, ": head_dim must be even for rotary embeddings, got ", c.head_dim);
  check_positive(c.intermediate_size, "intermediate_size", source);
  check_positive(c.vocab_size, "vocab_size", source);
  TS_CHECK(c.num_heads % c.num_kv_heads == 0, source, ": num_attention_heads must be a multiple of num_key_value_heads");
  TS_CHECK(c.mask_token_id < c.vocab_size, source, ": mask_token_id ", c.mask_token_id, " >= vocab_size ",
           c.vocab_size);
  auto taps = j.find("target_layer_ids");
  TS_CHECK(taps != j.end() && taps->is_array() && !taps->empty(), source,
           ": 'target_layer_ids' must be a non-empty list of target layer indices");
  for (const auto& t : *taps) {
    TS_CHECK(t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < (int64_t(1) << 31), source,
             ": bad entry in target_layer_ids: ", t.dump());
    c.target_layer_ids.push_back(t.get<int32_t>());
  }
  return c;
}

DrafterConfig load_drafter_config(const std::string& drafter_dir) {
  const std::string path = drafter_dir + "/config.json";
  TS_CHECK(file_exists(path), "no config.json in drafter folder ", drafter_dir);
  return parse_drafter_config(read_text_file(path), path);
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& source) {
  json j = parse_json(json_text, source);
  GenerationConfig g;
  g.present = true;
  auto number = [&](const char* key, double lo, double hi, bool lo_open) -> std::optional<float> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    TS_CHECK(it->is_number() && !it->is_boolean(), source, ": '", key, "' must be a number, got ", it->dump());
    const double v = it->get<double>();
    TS_CHECK(std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi, source, ": '", key, "' = ", v,
             " is outside ", lo_open ? "(" : "[", lo, ", ", hi, "]");
    return float(v);
  };
  g.temperature = number("temperature", 0.0, 1e30, false);
  g.top_p = number("top_p", 0.0, 1.0, true);
  g.min_p = number("min_p", 0.0, 1.0, false);
  g.repetition_penalty = number("repetition_penalty", 0.0, 10.0, true);
  if (auto m = j.find("max_new_tokens"); m != j.end() && !m->is_null()) {
    TS_CHECK(m->is_number_integer() && m->get<int64_t>() >= 1 && m->get<int64_t>() < (int64_t(1) << 31), source,
             ": 'max_new_tokens' must be a positive integer, got ", m->dump());
    g.max_new_tokens = m->get<int>();
  }
  auto k = j.find("top_k");
  if (k != j.end() && !k->is_null()) {
    TS_CHECK(k->is_number_integer() && k->get<int64_t>() >= 0 && k->get<int64_t>() < (int64_t(1) << 31), source,
             ": 'top_k' must be a non-negative integer, got ", k->dump());
    g.top_k = k->get<int>();
  }
  auto ds = j.find("do_sample");
  if (ds != j.end() && !ds->is_null()) {
    TS_CHECK(ds->is_boolean(), source, ": 'do_sample' must be true or false, got ", ds->dump());
    g.do_sample = ds->get<bool>();
  }
  g.eos_token_ids = parse_token_ids(j, "eos_token_id", source);
  // Each key with the value at which it does nothing.
  const std::pair<const char*, double> unsupported[] = {
      {"presence_penalty", 0.0}, {"frequency_penalty", 0.0}, {"typical_p", 1.0},
      {"epsilon_cutoff", 0.0},     {"eta_cutoff", 0.0},       {"no_repeat_ngram_size", 0.0}};
  for (const auto& [key, neutral] : unsupported) {
    auto it = j.find(key);
    if (it != j.end() && !(it->is_null() || (it->is_number() && it->get<double>() == neutral)))
      g.unsupported.push_back(key);
  }
  return g;
}

GenerationConfig load_generation_config(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  if (!file_exists(path)) return {};
  return parse_generation_config(read_text_file(path), path);
}

}  // namespace ts
