#include "engine/model_bundle.h"

#include <algorithm>
#include <cstdio>

#include "core/cpu.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "engine/generator.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"

namespace ts {

std::string resolve_drafter_weights(const std::string& choice, const TargetModel& target) {
  if (choice != "auto") return choice;
  return target.quantized_weights() ? "q8_0" : "native";
}

std::string ModelBundle::weights_summary() const {
  char mb[32];
  std::snprintf(mb, sizeof(mb), "%.1f", double(target->weight_bytes()) / 1e6);
  std::string s = "target weights " + target->weight_format() + ", " + mb + " MB per forward (" +
                  target->gemm_backend() + ")";
  if (target->quantized_weights() && weights_streamed()) s += ", streamed from DRAM";
  if (drafter) s += "; drafter weights " + drafter->weight_format();
  return s;
}

std::string ModelBundle::calibration_summary() const {
  if (calibration.entries.empty()) return "calibration: none (p_hat = q)";
  const std::string weights = target->weight_format(), drafter_weights = drafter ? drafter->weight_format() : "";
  std::string which;
  int own = 0, unrecorded = 0, other = 0;
  for (const spec_decode::CalibrationEntry& e : calibration.entries) {
    char t[96];
    std::snprintf(t, sizeof(t), "%sT %g", which.empty() ? "" : ", ", e.temperature);
    which += t;
    if (e.filter.top_k > 0) which += cat(" top-k ", e.filter.top_k);
    if (e.filter.top_p < 1) which += cat(" top-p ", e.filter.top_p);
    if (e.filter.min_p > 0) which += cat(" min-p ", e.filter.min_p);
    switch (spec_decode::weights_match(e, weights, drafter_weights)) {
      case spec_decode::WeightsMatch::Same: ++own; break;
      case spec_decode::WeightsMatch::NotRecorded: ++unrecorded; break;
      case spec_decode::WeightsMatch::Other: ++other; break;
    }
  }
  const size_t n = calibration.entries.size();
  std::string s = cat("calibration: ", n, n == 1 ? " entry (" : " entries (", which, "): ", own,
                      " fitted with these weight formats, ", unrecorded, " with formats not recorded");
  if (other > 0) s += cat(", ", other, " with other formats");
  return s;
}

ModelBundle ModelBundle::load(const std::string& model_dir, const std::string& drafter_dir,
                              const std::string& weights, const std::string& drafter_weights) {
  ModelBundle b;
  b.model_dir = model_dir;
  b.drafter_dir = drafter_dir;
  LoadOptions lo;
  lo.weights = parse_weight_scheme(weights);
  b.target = TargetModel::load(model_dir, lo);
  b.generation_config = load_generation_config(model_dir);
  if (!drafter_dir.empty()) {
    b.drafter = Drafter::load(drafter_dir, b.target->config(),
                              parse_weight_scheme(resolve_drafter_weights(drafter_weights, *b.target)));
    // The entries fitted with these weight formats where the file has them (CalibrationTable::for_weights).
    b.calibration = spec_decode::read_calibration_table(drafter_dir + "/" + spec_decode::kCalibrationFileName)
                        .for_weights(b.target->weight_format(), b.drafter->weight_format());
  }
  if (model_dir.size() > 5 && model_dir.compare(model_dir.size() - 5, 5, ".gguf") == 0) {
    // A GGUF target carries its tokenizer and chat template in its metadata (io/gguf_tokenizer.h).
    const io::GgufFile gguf(model_dir);
    if (gguf.has("tokenizer.ggml.tokens")) {
      b.tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_json(io::tokenizer_json_from_gguf(gguf), model_dir));
      if (gguf.has("tokenizer.chat_template")) {
        try {
          b.chat_template = std::make_unique<tok::ChatTemplate>(
              tok::ChatTemplate::from_config_text(io::tokenizer_config_json_from_gguf(gguf).dump(), model_dir));
        } catch (const Error& e) {
          b.chat_template_error = e.what();
        }
      } else {
        b.chat_template_error = "no tokenizer.chat_template in " + model_dir;
      }
    } else {
      b.chat_template_error = "no tokenizer in " + model_dir + " (no tokenizer.ggml.tokens)";
    }
  } else if (file_exists(model_dir + "/tokenizer.json")) {
    b.tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(model_dir + "/tokenizer.json"));
    // Any template loads; a folder without one (or with one outside the supported Jinja subset) still runs plain
    // text prompts, and only --chat reports the problem.
    if (!tok::ChatTemplate::model_dir_has_template(model_dir)) {
      b.chat_template_error = "no chat template in " + model_dir +
                              " (tokenizer_config.json has no \"chat_template\" and there is no chat_template.jinja)";
    } else {
      try {
        b.chat_template = std::make_unique<tok::ChatTemplate>(tok::ChatTemplate::from_model_dir(model_dir));
      } catch (const Error& e) {
        b.chat_template_error = e.what();
      }
    }
  } else {
    b.chat_template_error = "no tokenizer.json in " + model_dir;
  }
  return b;
}

std::optional<DType> parse_kv_dtype(const std::string& choice) {
  TS_CHECK(choice == "auto" || choice == "f32" || choice == "bf16", "KV cache dtype '", choice,
           "': expected auto, f32 or bf16");
  if (choice == "auto") return std::nullopt;
  return choice == "f32" ? DType::F32 : DType::BF16;
}

void ModelBundle::set_kv_dtype(const std::string& choice) {
  const std::optional<DType> dtype = parse_kv_dtype(choice);
  if (!dtype) return;
  target->set_kv_dtype(*dtype);
  if (drafter) drafter->set_kv_dtype(*dtype);
}

std::vector<int32_t> ModelBundle::stop_ids() const {
  std::vector<int32_t> ids =
      chat_template && tokenizer ? chat_template->stop_ids(*tokenizer) : target->config().eos_token_ids;
  for (int32_t id : generation_config.eos_token_ids)
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

std::vector<int32_t> ModelBundle::prompt_ids(const std::vector<int32_t>& ids, const std::string& text, bool chat,
                                             bool enable_thinking) const {
  TS_CHECK(ids.empty() != text.empty(), "give exactly one of --prompt-ids and --prompt");
  if (!ids.empty()) {
    TS_CHECK(!chat, "--chat needs a text prompt (--prompt)");
    return ids;
  }
  TS_CHECK(tokenizer, "--prompt needs a tokenizer.json in ", model_dir, " (or use --prompt-ids)");
  if (chat) {
    TS_CHECK(chat_template, "--chat needs the model folder's chat template: ", chat_template_error);
    return chat_template->encode_chat(*tokenizer, {{"user", text}}, /*add_generation_prompt=*/true, enable_thinking);
  }
  return tokenizer->encode(text);
}

int ModelBundle::emit_vocab() const {
  if (!tokenizer) return 0;
  const int ids = tokenizer->vocab_size(), rows = target->config().vocab_size;
  return ids < rows ? ids : 0;
}

std::string ModelBundle::decode(const std::vector<int32_t>& ids) const {
  return tokenizer ? tokenizer->decode(ids) : std::string();
}

double ModelBundle::warm_up() {
  const double t0 = now_ms();
  const int vocab = target->config().vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 64; ++i) prompt.push_back(int32_t((i * 7919 + 11) % vocab));
  Generator generator(*target, drafter.get());
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.mode = DecodeMode::None;
  generator.generate(prompt, o);
  if (drafter) {
    o.mode = DecodeMode::Tree;
    o.tree.theta = 0;
    o.tree.node_cap = 8;
    generator.generate(prompt, o);
  }
  return now_ms() - t0;
}

}  // namespace ts
