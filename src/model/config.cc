#include "model/config.h"

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

}  // namespace

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
  c.rope_theta = get_float(j, "rope_theta", source, 10000.0f);
  TS_CHECK(c.rope_theta > 0, source, ": rope_theta must be positive");
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 32768, false);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);
  c.qk_norm = qwen3;
  c.qkv_bias = qwen2 || get_bool(j, "attention_bias", source, false);

  auto rs = j.find("rope_scaling");
  if (rs != j.end() && !rs->is_null()) {
    TS_CHECK(rs->is_object(), source, ": 'rope_scaling' must be an object or null");
    std::string type = rs->value("rope_type", rs->value("type", std::string("default")));
    TS_CHECK(type == "default", source, ": unsupported rope_scaling type '", type,
             "' (only unscaled RoPE is implemented)");
  }
  TS_CHECK(!get_bool(j, "use_sliding_window", source, false), source,
           ": sliding-window attention (use_sliding_window=true) is not supported");

  c.bos_token_id = get_int(j, "bos_token_id", source, -1, false);
  auto eos = j.find("eos_token_id");
  if (eos != j.end() && eos->is_number_integer()) {
    c.eos_token_ids.push_back(eos->get<int32_t>());
  } else if (eos != j.end() && eos->is_array()) {
    for (const auto& e : *eos) {
      TS_CHECK(e.is_number_integer(), source, ": eos_token_id entries must be integers");
      c.eos_token_ids.push_back(e.get<int32_t>());
    }
  }
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
  c.markov_rank = get_int(j, "markov_rank", source, 0, true);
  c.mask_token_id = get_int(j, "mask_token_id", source, 0, true);
  c.num_layers = get_int(j, "num_hidden_layers", source, 0, true);
  c.hidden_size = get_int(j, "hidden_size", source, 0, true);
  c.num_heads = get_int(j, "num_attention_heads", source, 0, true);
  c.num_kv_heads = get_int(j, "num_key_value_heads", source, c.num_heads, false);
  c.head_dim = get_int(j, "head_dim", source, c.num_heads ? c.hidden_size / c.num_heads : 0, false);
  c.intermediate_size = get_int(j, "intermediate_size", source, 0, true);
  c.vocab_size = get_int(j, "vocab_size", source, 0, true);
  c.target_hidden_size = get_int(j, "target_hidden_size", source, c.hidden_size, false);
  c.rms_norm_eps = get_float(j, "rms_norm_eps", source, 1e-6f);
  c.rope_theta = get_float(j, "rope_theta", source, 10000.0f);
  check_positive(c.block_size, "block_size", source);
  TS_CHECK(c.block_size >= 2, source, ": block_size must be at least 2 (anchor + one draft)");
  check_positive(c.num_layers, "num_hidden_layers", source);
  check_positive(c.hidden_size, "hidden_size", source);
  check_positive(c.num_heads, "num_attention_heads", source);
  check_positive(c.num_kv_heads, "num_key_value_heads", source);
  check_positive(c.head_dim, "head_dim", source);
  check_positive(c.intermediate_size, "intermediate_size", source);
  check_positive(c.vocab_size, "vocab_size", source);
  check_positive(c.target_hidden_size, "target_hidden_size", source);
  TS_CHECK(c.num_heads % c.num_kv_heads == 0, source, ": num_attention_heads must be a multiple of num_key_value_heads");
  TS_CHECK(c.mask_token_id < c.vocab_size, source, ": mask_token_id ", c.mask_token_id, " >= vocab_size ",
           c.vocab_size);
  auto taps = j.find("target_layer_ids");
  TS_CHECK(taps != j.end() && taps->is_array() && !taps->empty(), source,
           ": 'target_layer_ids' must be a non-empty list of target layer indices");
  for (const auto& t : *taps) {
    TS_CHECK(t.is_number_integer() && t.get<int64_t>() >= 0, source, ": bad entry in target_layer_ids: ", t.dump());
    c.target_layer_ids.push_back(t.get<int32_t>());
  }
  return c;
}

DrafterConfig load_drafter_config(const std::string& drafter_dir) {
  const std::string path = drafter_dir + "/config.json";
  TS_CHECK(file_exists(path), "no config.json in drafter folder ", drafter_dir);
  return parse_drafter_config(read_text_file(path), path);
}

}  // namespace ts
