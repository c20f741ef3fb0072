// One completion request in flight: the channel its engine events arrive on, the text stream that turns ids
// into client text (stop strings, hidden end-of-turn ids), and the OpenAI JSON for its chunks and final
// response (usage and llama.cpp-style timings, read from the engine's RequestStats). The HTTP layer
// (http_server.cc) owns the transport; this file owns the content.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/prometheus.h"
#include "server/openai_request.h"
#include "server/text_stream.h"

namespace ts::server {

// The events of one request, pushed on the backend's thread, popped by the HTTP worker. push() copies an event,
// since its stats pointer lives only during the callback, and queues one that carries both tokens and the finish
// as two entries, tokens first, so each Completion::step applies one (a chunk for the tokens, then the end).
class EventChannel {
 public:
  struct Entry {
    RequestEvent event;  // event.stats and event.edges are null: the stats are copied below
    RequestStats stats;  // the final event's statistics (default for a tokens entry)
  };
  void push(const RequestEvent& event);
  std::optional<Entry> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Entry> entries_;
};

class Completion {
 public:
  Completion(const CompletionRequest& request, const ServedModel& model, int prompt_tokens, ServerMetrics& metrics);

  EventChannel& channel() { return channel_; }
  void set_backend(Backend* backend, RequestId id) { backend_ = backend, id_ = id; }

  // Waits up to `timeout` for the next channel entry and applies it; returns the text it released ("" if none or
  // on a timeout). After a stop string matched, the backend request is cancelled and later tokens are ignored.
  std::string step(std::chrono::milliseconds timeout);
  bool finished() const { return finished_; }   // the terminal event arrived
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Cancels the backend request (idempotent); the terminal event still arrives.
  void cancel();
  // The client is gone before the end: cancel, and count the request as aborted (no-op once finished).
  void abandon();

  // OpenAI JSON. Streaming: the first chunk (chat: the assistant role), a text chunk, the final chunk with
  // finish_reason (and usage + timings), the usage-only chunk (stream_options.include_usage).
  nlohmann::json first_chunk() const;
  // Streaming chunks carry the logprobs of the tokens that arrived since the last chunk (with logprobs asked).
  nlohmann::json text_chunk(const std::string& text);
  nlohmann::json final_chunk();
  nlohmann::json usage_chunk() const;
  nlohmann::json response() const;  // the non-streaming body, after finished()
  const CompletionRequest& request() const { return request_; }

 private:
  nlohmann::json chunk_base() const;
  nlohmann::json usage() const;
  nlohmann::json timings() const;
  std::string finish_reason() const;
  std::string take_tokens(const RequestEvent& event, std::chrono::steady_clock::time_point now);
  std::string take_finish(const EventChannel::Entry& entry);
  // OpenAI's logprobs object for tokens [from, to) of ids_ (completions: tokens / token_logprobs / top_logprobs /
  // text_offset, offsets counted from *offset, which advances; chat: content[]); null when not asked for.
  nlohmann::json logprobs_json(size_t from, size_t to, size_t* offset) const;
  nlohmann::json take_logprobs();  // streaming: the logprobs not sent yet
  double seconds_since(std::chrono::steady_clock::time_point t) const;

  CompletionRequest request_;
  std::string model_name_;
  ServerMetrics& metrics_;
  EventChannel channel_;
  TextStream text_;
  Backend* backend_ = nullptr;
  RequestId id_ = 0;
  std::string response_id_;
  long long created_ = 0;
  int prompt_tokens_ = 0;

  std::vector<int32_t> ids_;  // generated ids the client is answered for (up to a stop string's end)
  std::vector<TokenLogprobs> logprobs_;  // [ids_.size()] when the request asked for logprobs, else empty
  size_t logprobs_sent_ = 0, text_offset_ = 0;  // streaming: entries sent, their tokens' bytes
  const tok::Tokenizer* tokenizer_ = nullptr;
  std::string text_so_far_;   // non-streaming: the whole text
  bool stop_string_hit_ = false, cancelled_ = false, finished_ = false;
  std::string backend_finish_reason_, error_;
  RequestStats stats_;        // the engine's, from the final event
  std::chrono::steady_clock::time_point arrival_, first_token_, last_token_;
  bool got_first_token_ = false;
};

}  // namespace ts::server
