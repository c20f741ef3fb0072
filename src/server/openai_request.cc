#include "server/openai_request.h"

#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/logprobs.h"
#include "server/api_error.h"

namespace ts::server {

namespace {

using nlohmann::json;

const char* type_name(const json& v) { return v.type_name(); }

ApiError wrong_type(const std::string& param, const char* want, const json& got) {
  return bad_request("invalid_type", "'" + param + "' must be " + want + ", got " + type_name(got), param);
}

ApiError out_of_range(const std::string& param, const std::string& rule) {
  return bad_request("invalid_value", "'" + param + "' " + rule, param);
}

ApiError unsupported(const std::string& param, const std::string& why) {
  return bad_request("unsupported_parameter", "'" + param + "' " + why, param);
}

// A field that is absent or null counts as not given.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& v, const std::string& param) {
  if (!v.is_number()) throw wrong_type(param, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw out_of_range(param, "must be finite");
  return x;
}

// An integer given as a JSON integer (or a float with an integral value, as some clients send 16.0).
long long integer(const json& v, const std::string& param) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(LLONG_MAX))
    throw out_of_range(param, "is " + v.dump() + ", too large");
  if (v.is_number_integer()) return v.get<long long>();
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) return (long long)x;
    throw wrong_type(param, "an integer", v);
  }
  throw wrong_type(param, "an integer", v);
}

bool boolean(const json& v, const std::string& param) {
  if (!v.is_boolean()) throw wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

std::string content_text(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw wrong_type(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw wrong_type(p, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) throw bad_request("invalid_type", "'" + p + ".type' must be a string", p);
    if (*type != "text") throw unsupported(p + ".type", "'" + type->get<std::string>() + "' is not supported (text only)");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) throw bad_request("invalid_type", "'" + p + ".text' must be a string", p);
    text += t->get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, CompletionRequest& r) {
  const json* messages = field(body, "messages");
  if (!messages) throw bad_request("missing_field", "'messages' is required", "messages");
  if (!messages->is_array()) throw wrong_type("messages", "an array", *messages);
  if (messages->empty()) throw bad_request("invalid_value", "'messages' must not be empty", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw wrong_type(p, "an object", m);
    const json* role = field(m, "role");
    if (!role) throw bad_request("missing_field", "'" + p + ".role' is required", p + ".role");
    if (!role->is_string()) throw wrong_type(p + ".role", "a string", *role);
    std::string role_name = role->get<std::string>();
    if (role_name == "developer") role_name = "system";  // OpenAI's newer name for the system turn
    if (role_name != "system" && role_name != "user" && role_name != "assistant" && role_name != "tool")
      throw bad_request("invalid_role", "'" + p + ".role' is '" + role->get<std::string>() +
                        "'; expected system, developer, user, assistant or tool", p + ".role");
    const json* content = field(m, "content");
    std::string text;
    if (content) {
      text = content_text(*content, p + ".content");
    } else if (role_name != "assistant") {
      throw bad_request("missing_field", "'" + p + ".content' is required", p + ".content");
    }
    if (field(m, "tool_calls")) throw unsupported(p + ".tool_calls", "is not supported");
    r.messages.push_back({role_name, text});
  }
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw wrong_type("chat_template_kwargs", "an object", *kw);
    if (const json* t = field(*kw, "enable_thinking")) r.enable_thinking = boolean(*t, "chat_template_kwargs.enable_thinking");
  }
}

void parse_prompt(const json& body, CompletionRequest& r) {
  const json* prompt = field(body, "prompt");
  if (!prompt) throw bad_request("missing_field", "'prompt' is required", "prompt");
  // Read in place, never copied: a copy recurses once per nesting level, and a client's 1,000,000-deep array
  // overflowed a worker's stack that way.
  const json* unwrapped = prompt;
  // A one-element array holding one prompt is the same prompt; more than one is a batch, which needs n > 1.
  if (unwrapped->is_array() && unwrapped->size() == 1 && ((*unwrapped)[0].is_string() || (*unwrapped)[0].is_array()))
    unwrapped = &(*unwrapped)[0];
  const json& p = *unwrapped;
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
    if (r.prompt_text.empty()) throw bad_request("invalid_value", "'prompt' must not be empty", "prompt");
    return;
  }
  if (!p.is_array()) throw wrong_type("prompt", "a string or an array of token ids", p);
  if (p.empty()) throw bad_request("invalid_value", "'prompt' must not be empty", "prompt");
  for (const json& v : p) {
    if (v.is_string() || v.is_array()) throw unsupported("prompt", "holds several prompts; send one per request");
    if (!v.is_number_integer()) throw wrong_type("prompt", "a string or an array of token ids", v);
    // Checked here, where the number is still what the client sent (a clamped copy would be misquoted).
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX) : v.get<long long>() < 0)
      throw out_of_range("prompt", "holds token id " + v.dump() + ", outside the vocabulary");
    r.prompt_ids.push_back(int32_t(v.get<long long>()));
  }
}

void parse_stop(const json& body, CompletionRequest& r) {
  const json* stop = field(body, "stop");
  if (!stop) return;
  if (stop->is_string()) {
    r.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    for (const json& s : *stop) {
      if (!s.is_string()) throw wrong_type("stop", "a string or an array of strings", s);
      r.stop.push_back(s.get<std::string>());
    }
  } else {
    throw wrong_type("stop", "a string or an array of strings", *stop);
  }
  if (r.stop.size() > 16) throw out_of_range("stop", "holds more than 16 strings");
  for (const std::string& s : r.stop) {
    if (s.empty()) throw out_of_range("stop", "must not hold an empty string");
    if (s.size() > 256) throw out_of_range("stop", "strings must be at most 256 bytes");
  }
}

void parse_sampling(const json& body, const SamplingDefaults& defaults, CompletionRequest& r) {
  SamplingParams& s = r.options.sampling;
  s.temperature = defaults.temperature;
  s.top_p = defaults.top_p;
  s.top_k = defaults.top_k;
  s.min_p = defaults.min_p;
  r.options.repetition_penalty = defaults.repetition_penalty;
  if (const json* v = field(body, "temperature")) {
    s.temperature = float(number(*v, "temperature"));
    if (s.temperature < 0 || s.temperature > 2) throw out_of_range("temperature", "must be in [0, 2]");
  }
  if (const json* v = field(body, "top_p")) {
    s.top_p = float(number(*v, "top_p"));
    if (!(s.top_p > 0 && s.top_p <= 1)) throw out_of_range("top_p", "must be in (0, 1]");
  }
  if (const json* v = field(body, "top_k")) {
    const long long k = integer(*v, "top_k");
    if (k == -1) {
      s.top_k = 0;  // vLLM's "off"
    } else {
      if (k < 0 || k > (1 << 30)) throw out_of_range("top_k", "is " + v->dump() + "; it must be in [1, 2^30] (0 or -1: off)");
      s.top_k = int(k);
    }
  }
  if (const json* v = field(body, "min_p")) {
    s.min_p = float(number(*v, "min_p"));
    if (!(s.min_p >= 0 && s.min_p <= 1)) throw out_of_range("min_p", "must be in [0, 1]");
  }
  if (const json* v = field(body, "seed")) {
    if (v->is_number_unsigned()) {  // any 64-bit seed
      s.seed = v->get<uint64_t>();
    } else {
      const long long seed = integer(*v, "seed");
      if (seed < 0) throw out_of_range("seed", "is " + v->dump() + "; it must be >= 0");
      s.seed = uint64_t(seed);
    }
    r.seed_given = true;
  }
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (const json* v = field(body, name)) {
      const double x = number(*v, name);
      if (x < -2 || x > 2) throw out_of_range(name, "is " + v->dump() + "; it must be in [-2, 2]");
      (std::string(name) == "presence_penalty" ? r.options.presence_penalty : r.options.frequency_penalty) = float(x);
    }
  }
  if (const json* v = field(body, "repetition_penalty")) {
    const double x = number(*v, "repetition_penalty");
    if (!(x > 0 && x <= 10)) throw out_of_range("repetition_penalty", "is " + v->dump() + "; it must be in (0, 10]");
    r.options.repetition_penalty = float(x);
  }
}

// logprobs / top_logprobs (the two endpoints spell them differently), logit_bias, min_tokens, ignore_eos.
void parse_output_controls(const json& body, CompletionRequest& r) {
  const auto top_n = [](const json& v, const char* name) {
    const long long k = integer(v, name);
    if (k < 0 || k > kMaxTopLogprobs)
      throw out_of_range(name, "is " + v.dump() + "; it must be in [0, " + std::to_string(kMaxTopLogprobs) + "]");
    return int(k);
  };
  if (r.chat) {
    const json* want = field(body, "logprobs");
    const bool on = want && boolean(*want, "logprobs");
    if (const json* v = field(body, "top_logprobs")) {
      const int k = top_n(*v, "top_logprobs");
      if (!on) throw bad_request("invalid_value", "'top_logprobs' needs 'logprobs': true", "top_logprobs");
      r.options.logprobs = k;
    } else if (on) {
      r.options.logprobs = 0;
    }
  } else if (const json* v = field(body, "logprobs")) {
    if (!(v->is_boolean() && !v->get<bool>())) r.options.logprobs = top_n(*v, "logprobs");  // false: off, as null
  }
  if (const json* v = field(body, "logit_bias")) {
    if (!v->is_object()) throw wrong_type("logit_bias", "an object of token id: bias", *v);
    if (v->size() > 1024) throw out_of_range("logit_bias", "holds more than 1024 tokens");
    for (const auto& [key, bias] : v->items()) {
      const std::string param = "logit_bias." + key.substr(0, 32);
      const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoll(key) > INT32_MAX)
        throw bad_request("invalid_value", "'logit_bias' keys must be token ids, got '" + key.substr(0, 32) + "'",
                          "logit_bias");
      const double b = number(bias, param);
      if (b < -100 || b > 100) throw out_of_range(param, "is " + bias.dump() + "; a bias must be in [-100, 100]");
      r.options.logit_bias.emplace_back(int32_t(std::stoll(key)), float(b));
    }
  }
  if (const json* v = field(body, "min_tokens")) {
    const long long n = integer(*v, "min_tokens");
    if (n < 0 || n > (1 << 30)) throw out_of_range("min_tokens", "is " + v->dump() + "; it must be >= 0");
    r.options.min_tokens = int(n);
  }
  if (const json* v = field(body, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
}

void reject_unsupported(const json& body, bool chat) {
  if (const json* v = field(body, "n"))
    if (integer(*v, "n") != 1) throw unsupported("n", "must be 1");
  if (const json* v = field(body, "best_of"))
    if (integer(*v, "best_of") != 1) throw unsupported("best_of", "must be 1");
  if (const json* v = field(body, "echo"))
    if (boolean(*v, "echo")) throw unsupported("echo", "is not supported");
  if (field(body, "suffix")) throw unsupported("suffix", "is not supported");
  for (const char* name : {"tools", "functions"})
    if (const json* v = field(body, name))
      if (!(v->is_array() && v->empty())) throw unsupported(name, "is not supported");
  if (const json* v = field(body, "response_format")) {
    if (!v->is_object()) throw wrong_type("response_format", "an object", *v);
    const json* t = field(*v, "type");
    if (!t || *t != "text") throw unsupported("response_format", "only {\"type\": \"text\"} is supported");
  }
  // Parameters that would change the output and are not implemented are refused by name rather than ignored;
  // their neutral values are accepted. Harmless metadata (service_tier, parallel_tool_calls, prediction: a latency
  // hint) is accepted and has no effect.
  if (const json* v = field(body, "reasoning_effort"))
    if (!v->is_null()) throw unsupported("reasoning_effort", "is not supported");
  if (const json* v = field(body, "modalities"))
    if (!(v->is_null() || *v == json::array({"text"}))) throw unsupported("modalities", "only [\"text\"] is supported");
  if (const json* v = field(body, "tool_choice"))
    if (!(v->is_null() || *v == "none" || *v == "auto"))
      throw unsupported("tool_choice", "needs tools, which are not supported (\"none\" and \"auto\" are accepted)");
  (void)chat;
}

// Nesting depth of the JSON text's arrays and objects, counted before parsing so that no parse, copy or
// destruction of the value ever recurses deeper than kMaxJsonDepth (a string's brackets do not count).
int json_nesting_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body_text, bool chat, const RequestOptions& defaults,
                                           const SamplingDefaults& sampling) {
  if (json_nesting_depth(body_text) > kMaxJsonDepth)
    throw bad_request("invalid_json", "the request body nests arrays and objects deeper than " +
                                          std::to_string(kMaxJsonDepth) + " levels");
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw bad_request("invalid_json", "the request body is not valid JSON");
  if (!body.is_object()) throw bad_request("invalid_json", std::string("the request body must be a JSON object, got ") + type_name(body));
  CompletionRequest r;
  r.chat = chat;
  r.options = defaults;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  if (chat) {
    parse_messages(body, r);
  } else {
    parse_prompt(body, r);
  }
  reject_unsupported(body, chat);
  parse_sampling(body, sampling, r);
  parse_output_controls(body, r);
  parse_stop(body, r);
  // Chat's newer name first: max_completion_tokens, then max_tokens.
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    if (const json* v = field(body, name)) {
      const long long n = integer(*v, name);
      if (n < 1) throw out_of_range(name, "must be >= 1");
      r.max_tokens = int(std::min<long long>(n, 1 << 30));
      break;
    }
  }
  if (const json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) throw wrong_type("stream_options", "an object", *v);
    if (!r.stream) throw bad_request("invalid_value", "'stream_options' is only allowed with stream=true", "stream_options");
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (const json* v = field(body, "return_token_ids")) r.return_token_ids = boolean(*v, "return_token_ids");
  if (const json* v = field(body, "skip_special_tokens")) r.skip_special_tokens = boolean(*v, "skip_special_tokens");
  return r;
}

Request prepare_request(const CompletionRequest& r, const ServedModel& model) {
  if (!r.model.empty() && r.model != model.name)
    throw ApiError(404, "invalid_request_error", "model_not_found",
                   "the model '" + r.model + "' does not exist; this server serves '" + model.name + "'", "model");
  Request p;
  try {
    if (r.chat) {
      if (!model.chat_template)
        throw bad_request("no_chat_template", "the model has no chat template; use /v1/completions");
      p.prompt = model.chat_template->encode_chat(*model.tokenizer, r.messages, /*add_generation_prompt=*/true,
                                                  r.enable_thinking);
    } else if (!r.prompt_ids.empty()) {
      p.prompt = r.prompt_ids;
      for (int32_t id : p.prompt)
        if (id < 0 || id >= model.vocab_size)
          throw out_of_range("prompt", "holds token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                           std::to_string(model.vocab_size) + ")");
    } else {
      p.prompt = model.tokenizer->encode(r.prompt_text);
    }
  } catch (const ts::Error& e) {  // e.g. invalid UTF-8 that slipped through, a template that cannot render
    throw bad_request("invalid_prompt", std::string("the prompt cannot be tokenized: ") + e.what(),
                      r.chat ? "messages" : "prompt");
  }
  if (p.prompt.empty()) throw bad_request("invalid_value", "the prompt has no tokens", r.chat ? "messages" : "prompt");
  const int P = int(p.prompt.size());
  const int room = model.max_context - P;
  auto too_long = [&](int asked) {
    return bad_request("context_length_exceeded",
                       "this model's maximum context length is " + std::to_string(model.max_context) +
                           " tokens; the request has " + std::to_string(P) + " prompt tokens and asks for " +
                           std::to_string(asked) + " new tokens",
                       r.chat ? "messages" : "prompt");
  };
  if (room < 1) throw too_long(std::max(r.max_tokens, 1));
  if (r.max_tokens > room) throw too_long(r.max_tokens);
  p.options = r.options;
  RequestOptions& o = p.options;
  if (r.max_tokens > 0) {
    o.max_new_tokens = r.max_tokens;
  } else {
    o.max_new_tokens = r.chat ? room : std::min(16, room);
    if (model.sampling.max_tokens > 0) o.max_new_tokens = std::min(o.max_new_tokens, model.sampling.max_tokens);
  }
  for (const auto& [id, bias] : o.logit_bias)
    if (id >= model.vocab_size)
      throw out_of_range("logit_bias", "holds token id " + std::to_string(id) + ", outside the vocabulary [0, " +
                                           std::to_string(model.vocab_size) + ")");
  if (o.min_tokens > o.max_new_tokens)
    throw out_of_range("min_tokens", "is " + std::to_string(o.min_tokens) + ", more than the " +
                                         std::to_string(o.max_new_tokens) + " new tokens this request may generate");
  // ignore_eos: end-of-turn ids neither end generation nor are masked by min_tokens; they stay hidden in the text.
  o.stop_ids = r.ignore_eos ? std::vector<int32_t>{} : model.stop_ids;
  return p;
}

}  // namespace ts::server
