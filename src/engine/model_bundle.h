// What a command needs to run a model pair: the target, optionally the drafter, the tokenizer and chat template
// when the target folder has them, and the drafter's calibration table.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/target_model.h"
#include "spec_decode/calibration_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ts {

// A --kv-dtype choice: "auto" gives nullopt (each model keeps the dtype it chose at load: bf16 for bf16
// weights), "f32" and "bf16" the dtype. Throws ts::Error naming the choices for anything else.
std::optional<DType> parse_kv_dtype(const std::string& choice);

// A --drafter-quantize choice for a target: "auto" gives "q8_0" when the target's projections are quantized and
// "native" otherwise; any other choice is returned as given. The drafter's block forward is compute-bound (all block
// positions at once), so integer products make it cheaper; beside a quantized target, whose own step is short, that
// is worth more than the few drafts the coarser drafter loses (docs/architecture.md, "Drafter format").
std::string resolve_drafter_weights(const std::string& choice, const TargetModel& target);

struct ModelBundle {
  std::string model_dir, drafter_dir;
  std::unique_ptr<TargetModel> target;
  std::unique_ptr<Drafter> drafter;                 // null without --drafter
  std::unique_ptr<tok::Tokenizer> tokenizer;        // null when the folder has no tokenizer.json
  std::unique_ptr<tok::ChatTemplate> chat_template; // null when the folder has no (usable) chat template
  std::string chat_template_error;                  // why chat_template is null: what --chat reports
  spec_decode::CalibrationTable calibration;               // empty without a treespark_calibration.json
  GenerationConfig generation_config;               // present = false without a generation_config.json

  // weights: the target's weight format (model/weight_plan.h; "native", "q8_0", "q4_0", "q4_k_m");
  // drafter_weights: the drafter's (`--drafter-quantize`); "auto" (resolve_drafter_weights) by default.
  static ModelBundle load(const std::string& model_dir, const std::string& drafter_dir,
                          const std::string& weights = "native", const std::string& drafter_weights = "auto");

  // KV cache element type of the target and drafter (parse_kv_dtype). Call before making caches.
  void set_kv_dtype(const std::string& choice);

  // Token ids that end generation: the chat template's stop ids, else config.json's eos ids; either way merged
  // with generation_config.json's eos ids (each id once, in that order).
  std::vector<int32_t> stop_ids() const;
  // Prompt ids from exactly one of: ids, plain text, or a user chat message.
  std::vector<int32_t> prompt_ids(const std::vector<int32_t>& ids, const std::string& text, bool chat,
                                  bool enable_thinking) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // "" without a tokenizer
  // The ids the engine may emit (EngineConfig::emit_vocab): the tokenizer's size where the model's vocabulary is
  // padded beyond it, else 0 (all of it; also without a tokenizer).
  int emit_vocab() const;
  // "target weights <format>, <MB> MB per forward (<GEMM backend>)[; drafter weights <format>]": what generate and
  // serve log.
  std::string weights_summary() const;
  // "calibration: N entries (T 0, T 0.7 top-k 20, ...): K fitted with these weight formats, M with formats not
  // recorded[, L with other formats]", or "calibration: none (p_hat = q)" without entries: what serve logs.
  std::string calibration_summary() const;

  // Runs a short plain and a short speculative generation (a fixed 64-token prompt, a few rounds) so that what comes
  // next does not pay the process's one-off costs (first touch of caches and buffers, the thread pool's start, table
  // builds), which make the first step many times slower than the next (docs/results/optimization-notes.md, "Server:
  // warm-up before the first client"). serve runs it before its first client, generate --compare before timing
  // either side. The models keep no state from it. Returns the ms it took.
  double warm_up();
};

}  // namespace ts
