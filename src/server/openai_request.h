// Parsing and validating the body of POST /v1/completions and /v1/chat/completions into a CompletionRequest,
// then turning it into token ids with the model's tokenizer and chat template. Every problem is an ApiError
// (400, or 404 for an unknown model) naming the field; nothing here touches the network or the backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampling_params.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {

// What the HTTP layer needs to know about the served model.
struct ServedModel {
  std::string name;                                 // the id /v1/models lists and requests may name
  const tok::Tokenizer* tokenizer = nullptr;        // required
  const tok::ChatTemplate* chat_template = nullptr; // null: /v1/chat/completions answers 400
  std::vector<int32_t> stop_ids;                    // end-of-turn / eos ids (never shown as text)
  int max_context = 0;                              // prompt + generated tokens
  int vocab_size = 0;
};

struct CompletionRequest {
  bool chat = false;
  std::string model;                       // "" when not given
  std::string prompt_text;                 // completions: a text prompt ...
  std::vector<int32_t> prompt_ids;         // ... or token ids (exactly one is set)
  std::vector<tok::ChatMessage> messages;  // chat
  bool enable_thinking = true;             // chat_template_kwargs.enable_thinking
  int max_tokens = -1;                     // -1: the endpoint's default
  SamplingParams sampling;
  bool seed_given = false;                 // "seed" was in the body; without it the server draws a fresh seed
  std::vector<std::string> stop;           // stop strings (not included in the output)
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  bool return_token_ids = false;           // treespark extension: the generated ids in each choice
  bool skip_special_tokens = true;         // vLLM's extension: special added tokens (<|im_start|>) are not shown
  // Completions: logprobs = k (0..20); chat: logprobs = true with top_logprobs = k. -1: none.
  int logprobs = -1;
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI's {"token id": bias in [-100, 100]}
  int min_tokens = 0;                      // vLLM: end-of-turn ids cannot come before this many new tokens
  bool ignore_eos = false;                 // vLLM: end-of-turn ids do not end generation (they stay hidden)
  float presence_penalty = 0, frequency_penalty = 0;  // OpenAI, [-2, 2], over the generated tokens
  float repetition_penalty = 1;            // vLLM, (0, 10], over prompt and generated tokens
};

// Bodies nesting arrays and objects deeper than this are refused before they are parsed (400 invalid_json).
constexpr int kMaxJsonDepth = 128;

// Throws ApiError on malformed JSON, nesting past kMaxJsonDepth, wrong types, unknown roles, out-of-range or
// unsupported parameters.
CompletionRequest parse_completion_request(const std::string& body, bool chat);

struct PreparedPrompt {
  std::vector<int32_t> ids;  // [P]
  int max_tokens = 0;        // resolved: the request's, clamped to the room left in the context
};

// Tokenizes (chat template for chat) and checks the context limit: a prompt that leaves no room for one new
// token is a 400 context_length_exceeded, as is an explicit max_tokens that does not fit.
PreparedPrompt prepare_prompt(const CompletionRequest& request, const ServedModel& model);

}  // namespace ts::server
