#include "server/completion.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>

namespace ts::server {

using nlohmann::json;

void EventChannel::push(const RequestEvent& event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool ends = event.finish != FinishReason::None;
    if (!event.tokens.empty()) {
      Entry tokens;
      tokens.event.id = event.id;
      tokens.event.tokens = event.tokens;
      tokens.event.logprobs = event.logprobs;
      entries_.push_back(std::move(tokens));
    }
    if (ends) {
      Entry last;
      last.event.id = event.id;
      last.event.finish = event.finish;
      last.event.error = event.error;
      if (event.stats) last.stats = *event.stats;
      entries_.push_back(std::move(last));
    }
  }
  ready_.notify_one();
}

std::optional<EventChannel::Entry> EventChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !entries_.empty(); })) return std::nullopt;
  Entry e = std::move(entries_.front());
  entries_.pop_front();
  return e;
}

namespace {

std::string new_response_id(bool chat) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%012llx%06llx", chat ? "chatcmpl" : "cmpl",
                (unsigned long long)(rng() & 0xffffffffffffull), (unsigned long long)(counter++ & 0xffffff));
  return buf;
}

}  // namespace

Completion::Completion(const CompletionRequest& request, const ServedModel& model, int prompt_tokens,
                       ServerMetrics& metrics)
    : request_(request),
      model_name_(model.name),
      metrics_(metrics),
      text_(*model.tokenizer, model.stop_ids, request.stop, request.skip_special_tokens),
      response_id_(new_response_id(request.chat)),
      created_((long long)std::time(nullptr)),
      prompt_tokens_(prompt_tokens),
      arrival_(std::chrono::steady_clock::now()) {
  tokenizer_ = model.tokenizer;
}

double Completion::seconds_since(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void Completion::cancel() {
  if (cancelled_ || finished_ || !backend_) return;
  cancelled_ = true;
  backend_->cancel(id_);
}

void Completion::abandon() {
  if (finished_) return;
  cancel();
  finished_ = true;  // nobody reads further events; the backend's terminal event lands in the channel unread
  metrics_.request_finished("abort", seconds_since(arrival_), int(ids_.size()));
}

std::string Completion::step(std::chrono::milliseconds timeout) {
  if (finished_) return "";
  std::optional<EventChannel::Entry> entry = channel_.pop(timeout);
  if (!entry) return "";
  const std::string out = entry->event.finish == FinishReason::None
                              ? take_tokens(entry->event, std::chrono::steady_clock::now())
                              : take_finish(*entry);
  if (!request_.stream) text_so_far_ += out;
  return out;
}

std::string Completion::take_tokens(const RequestEvent& event, std::chrono::steady_clock::time_point now) {
  if (stop_string_hit_) return "";
  std::string out;
  int taken = 0;
  for (size_t i = 0; i < event.tokens.size(); ++i) {
    const int32_t id = event.tokens[i];
    ids_.push_back(id);
    if (request_.options.logprobs >= 0 && i < event.logprobs.size()) logprobs_.push_back(event.logprobs[i]);
    ++taken;
    out += text_.push(id);
    if (text_.stopped()) {
      stop_string_hit_ = true;
      cancel();
      break;
    }
  }
  if (taken > 0) {
    if (!got_first_token_) {
      got_first_token_ = true;
      first_token_ = now;
      metrics_.first_token(std::chrono::duration<double>(now - arrival_).count());
    } else {
      metrics_.tokens(taken, std::chrono::duration<double>(now - last_token_).count());
    }
    last_token_ = now;
  }
  return out;
}

std::string Completion::take_finish(const EventChannel::Entry& entry) {
  finished_ = true;
  stats_ = entry.stats;
  if (entry.event.finish == FinishReason::Error) {
    error_ = entry.event.error.empty() ? "generation failed" : entry.event.error;
  } else {
    backend_finish_reason_ = finish_reason_name(entry.event.finish);
  }
  const std::string out = stop_string_hit_ ? "" : text_.finish();
  const std::string reason = finish_reason();
  metrics_.request_finished(reason == "cancelled" ? "abort" : reason, seconds_since(arrival_), int(ids_.size()));
  return out;
}

std::string Completion::finish_reason() const {
  if (stop_string_hit_) return "stop";
  if (!error_.empty()) return "error";
  return backend_finish_reason_.empty() ? "length" : backend_finish_reason_;
}

json Completion::usage() const {
  const int n = int(ids_.size());
  // OpenAI's prompt_tokens_details.cached_tokens: the prompt tokens the engine's prefix cache supplied.
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", n},
          {"total_tokens", prompt_tokens_ + n},
          {"prompt_tokens_details", {{"cached_tokens", stats_.cached_prompt_tokens}}}};
}

json Completion::timings() const {
  const double prompt_ms =
      got_first_token_ ? std::chrono::duration<double, std::milli>(first_token_ - arrival_).count() : 0.0;
  const double predicted_ms =
      got_first_token_ ? std::chrono::duration<double, std::milli>(last_token_ - first_token_).count() : 0.0;
  const int n = int(ids_.size());
  return {{"prompt_n", prompt_tokens_},
          {"prompt_ms", prompt_ms},
          {"predicted_n", n},
          {"predicted_ms", predicted_ms},
          {"predicted_per_second", predicted_ms > 0 ? 1000.0 * (n - 1) / predicted_ms : 0.0},
          {"draft_n", stats_.draft_n()},
          {"draft_n_accepted", stats_.draft_n_accepted()},
          {"rounds", stats_.rounds},
          {"tokens_per_round", stats_.tokens_per_round()},
          {"mean_tree_size", stats_.mean_tree_size()},
          {"queue_ms", stats_.queue_ms}};
}

json Completion::chunk_base() const {
  return {{"id", response_id_},
          {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_name_}};
}

json Completion::first_chunk() const {
  json j = chunk_base();
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

json Completion::text_chunk(const std::string& text) {
  json j = chunk_base();
  json choice = {{"index", 0}, {"logprobs", take_logprobs()}, {"finish_reason", nullptr}};
  if (request_.chat) {
    choice["delta"] = {{"content", text}};
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

json Completion::final_chunk() {
  json j = chunk_base();
  json choice = {{"index", 0}, {"logprobs", take_logprobs()}, {"finish_reason", finish_reason()}};
  if (request_.chat) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  if (request_.return_token_ids) choice["token_ids"] = ids_;
  j["choices"] = json::array({choice});
  // With include_usage the usage comes once, in the chunk after this one (OpenAI, vLLM); without it, here
  // (llama.cpp puts usage and timings on the last chunk).
  j["usage"] = request_.include_usage ? json(nullptr) : usage();
  j["timings"] = timings();
  j["seed"] = request_.options.sampling.seed;
  return j;
}

json Completion::usage_chunk() const {
  json j = chunk_base();
  j["choices"] = json::array();
  j["usage"] = usage();
  j["timings"] = timings();
  return j;
}

json Completion::response() const {
  json j = {{"id", response_id_},
            {"object", request_.chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", model_name_}};
  size_t offset = 0;
  json choice = {{"index", 0}, {"logprobs", logprobs_json(0, logprobs_.size(), &offset)}, {"finish_reason", finish_reason()}};
  if (request_.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_so_far_}};
  } else {
    choice["text"] = text_so_far_;
  }
  if (request_.return_token_ids) choice["token_ids"] = ids_;
  j["choices"] = json::array({choice});
  j["usage"] = usage();
  j["timings"] = timings();
  j["seed"] = request_.options.sampling.seed;  // the seed this sample used (drawn afresh when the request had none)
  return j;
}

namespace {

// JSON cannot hold -inf (a token the request's logit edits banned): vLLM's stand-in.
double finite_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

json byte_values(const std::string& text) {
  json out = json::array();
  for (unsigned char c : text) out.push_back(int(c));
  return out;
}

}  // namespace

json Completion::logprobs_json(size_t from, size_t to, size_t* offset) const {
  if (request_.options.logprobs < 0) return nullptr;
  to = std::min(to, logprobs_.size());
  // A token's text on its own: raw bytes, which may be part of a UTF-8 character (the JSON writer then shows
  // U+FFFD; chat's `bytes` keep them exact).
  auto piece = [&](int32_t id) { return tokenizer_->decode({id}); };
  if (request_.chat) {
    json content = json::array();
    for (size_t i = from; i < to; ++i) {
      const TokenLogprobs& lp = logprobs_[i];
      const std::string text = piece(ids_[i]);
      json top = json::array();
      for (const auto& [id, value] : lp.top) {
        const std::string t = piece(id);
        top.push_back({{"token", t}, {"logprob", finite_logprob(value)}, {"bytes", byte_values(t)}});
      }
      content.push_back({{"token", text}, {"logprob", finite_logprob(lp.logprob)}, {"bytes", byte_values(text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = from; i < to; ++i) {
    const TokenLogprobs& lp = logprobs_[i];
    const std::string text = piece(ids_[i]);
    tokens.push_back(text);
    values.push_back(finite_logprob(lp.logprob));
    json top = json::object();
    for (const auto& [id, value] : lp.top) top[piece(id)] = finite_logprob(value);
    tops.push_back(top);
    offsets.push_back(*offset);
    *offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json Completion::take_logprobs() {
  if (request_.options.logprobs < 0 || logprobs_sent_ >= logprobs_.size()) return nullptr;
  json j = logprobs_json(logprobs_sent_, logprobs_.size(), &text_offset_);
  logprobs_sent_ = logprobs_.size();
  return j;
}

}  // namespace ts::server
