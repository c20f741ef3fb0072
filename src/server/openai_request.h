// Parsing and validating the body of POST /v1/completions and /v1/chat/completions into a CompletionRequest,
// then turning it into the engine's Request (engine/request.h) with the model's tokenizer and chat template. The
// body's sampling and output controls are parsed straight into the engine's RequestOptions, so nothing is copied
// field by field on the way to the engine. Every problem is an ApiError (400, or 404 for an unknown model) naming
// the field; nothing here touches the network or the backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {

// What a request gets for the sampling fields its body leaves out: OpenAI's defaults (temperature 1, the rest
// off), or the checkpoint's generation_config.json values as vLLM applies them (serve --generation-config auto,
// model_setup.h's sampling_defaults). max_tokens > 0 bounds a completion whose body names no length (vLLM's use of
// the file's max_new_tokens); an explicit max_tokens is the client's.
struct SamplingDefaults {
  float temperature = 1, top_p = 1, min_p = 0, repetition_penalty = 1;
  int top_k = 0;
  int max_tokens = 0;  // 0: the endpoint's own default (chat: the room left; completions: 16)
};

// What the HTTP layer needs to know about the served model.
struct ServedModel {
  std::string name;                                 // the id /v1/models lists and requests may name
  const tok::Tokenizer* tokenizer = nullptr;        // required
  const tok::ChatTemplate* chat_template = nullptr; // null: /v1/chat/completions answers 400
  std::vector<int32_t> stop_ids;                    // end-of-turn / eos ids (never shown as text)
  int max_context = 0;                              // prompt + generated tokens
  int vocab_size = 0;
  // What every request's options start from: the operator's decode mode, tree and load-adaptive policy. The body
  // then sets sampling and the output controls; those fields should be left at their defaults here.
  RequestOptions request_defaults;
  SamplingDefaults sampling;  // for the sampling fields a body leaves out
};

struct CompletionRequest {
  bool chat = false;
  std::string model;                       // "" when not given
  std::string prompt_text;                 // completions: a text prompt ...
  std::vector<int32_t> prompt_ids;         // ... or token ids (exactly one is set)
  std::vector<tok::ChatMessage> messages;  // chat
  bool enable_thinking = true;             // chat_template_kwargs.enable_thinking
  int max_tokens = -1;                     // -1: the endpoint's default
  // The engine's options as the body sets them: sampling (temperature, top_p, top_k, min_p, seed), logprobs
  // (completions: logprobs = k; chat: logprobs = true with top_logprobs = k; -1: none), logit_bias, min_tokens and
  // the penalties; everything else as the server's defaults. max_new_tokens and stop_ids are set by
  // prepare_request.
  RequestOptions options;
  bool seed_given = false;                 // "seed" was in the body; without it the server draws a fresh seed
  std::vector<std::string> stop;           // stop strings (not included in the output)
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  bool return_token_ids = false;           // treespark extension: the generated ids in each choice
  bool skip_special_tokens = true;         // vLLM's extension: special added tokens (<|im_start|>) are not shown
  bool ignore_eos = false;                 // vLLM: end-of-turn ids do not end generation (they stay hidden)
};

// Bodies nesting arrays and objects deeper than this are refused before they are parsed (400 invalid_json).
constexpr int kMaxJsonDepth = 128;

// Throws ApiError on malformed JSON, nesting past kMaxJsonDepth, wrong types, unknown roles, out-of-range or
// unsupported parameters. The result's options start from `defaults` (ServedModel::request_defaults); temperature,
// top_p, top_k, min_p and repetition_penalty the body leaves out come from `sampling` (ServedModel::sampling).
CompletionRequest parse_completion_request(const std::string& body, bool chat, const RequestOptions& defaults = {},
                                           const SamplingDefaults& sampling = {});

// The engine request: the prompt tokenized (chat template for chat) into prompt [P], and the options with
// max_new_tokens resolved (the body's max_tokens, or the endpoint's default bounded by ServedModel::sampling's
// max_tokens, within the room left in the context)
// and the model's end-of-turn ids as stop_ids (none with ignore_eos). A prompt that leaves no room for one new
// token is a 400 context_length_exceeded, as is an explicit max_tokens that does not fit.
Request prepare_request(const CompletionRequest& request, const ServedModel& model);

}  // namespace ts::server
