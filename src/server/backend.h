// What the HTTP server needs from whatever generates tokens: submit a request, receive its token events, cancel
// it, drain, and read a metrics snapshot. The server (http_server.h) speaks only to this interface, so it is
// tested with a fake backend over real HTTP, and the batched step engine plugs in through an adapter
// (engine_backend.h). No transport code lives behind this line, and no model code in front of it.
//
// Contract:
//   - submit() never blocks on generation. It either accepts the request (then the sink later receives zero or
//     more Tokens events and exactly one terminal event, Finished or Failed, even after cancel()) or refuses it
//     with a status, and then the sink is never called.
//   - The sink is called from a backend thread, one event at a time per request, in order. It must be cheap and
//     must not throw or block (the server pushes the event into the request's channel and returns).
//   - cancel(id) is idempotent and safe for an id that already finished; the request's slot and KV are released
//     before its terminal event ("cancelled") is sent.
//   - A request that fails (an exception inside the backend) gets Failed; the others keep running.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sampling/logprobs.h"
#include "sampling/sampling_params.h"

namespace ts::server {

struct BackendRequest {
  std::vector<int32_t> prompt;    // [P] token ids, P >= 1, P < the context limit
  SamplingParams sampling;
  int max_tokens = 16;            // new tokens, >= 1; prompt + max_tokens <= the context limit
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these (it is emitted)
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the target's logits (ids in the vocabulary)
  int min_tokens = 0;             // stop_ids cannot be emitted before this many new tokens
  int logprobs = -1;              // -1: off; k >= 0: each token's logprob and the top k (sampling/logprobs.h)
  float presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;  // neutral values: off
};

// Per-request figures, reported with the terminal event (llama.cpp reports the same as `timings`).
struct RequestStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int rounds = 0;                  // speculative rounds (0 without speculation)
  long draft_tokens = 0;           // draft-tree nodes sent to verification, root excluded (llama.cpp draft_n)
  long accepted_draft_tokens = 0;  // of those, accepted (llama.cpp draft_n_accepted)
  double queue_ms = 0;             // submit -> admitted
  double prefill_ms = 0;
  double decode_ms = 0;
  double tokens_per_round() const { return rounds ? double(accepted_draft_tokens + rounds) / rounds : 0; }
  double mean_tree_size() const { return rounds ? double(draft_tokens) / rounds : 0; }
};

struct BackendEvent {
  enum class Kind { Tokens, Finished, Failed };
  Kind kind = Kind::Tokens;
  std::vector<int32_t> ids;   // Tokens: newly final tokens, in order (a speculative round gives several)
  std::vector<TokenLogprobs> logprobs;  // Tokens with BackendRequest::logprobs >= 0: [ids.size()], else empty
  std::string finish_reason;  // Finished: "stop" (a stop id), "length" (max_tokens or context), "cancelled"
  std::string error;          // Failed: what went wrong
  RequestStats stats;         // Finished / Failed
};

using EventSink = std::function<void(BackendEvent&&)>;

enum class SubmitStatus { Accepted, QueueFull, Draining, Invalid };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::Accepted;
  uint64_t id = 0;      // valid when Accepted
  std::string message;  // why not
};

// A point-in-time snapshot; the counters only grow.
struct BackendMetrics {
  int running = 0;                 // requests admitted (prefilling or decoding)
  int waiting = 0;                 // requests queued, not yet admitted
  double kv_cache_usage = 0;       // fraction of the KV budget in use, [0, 1]
  long spec_drafts = 0;            // speculative rounds (vLLM: num_drafts)
  long spec_draft_tokens = 0;      // draft tokens verified (vLLM: num_draft_tokens)
  long spec_accepted_tokens = 0;   // draft tokens accepted (vLLM: num_accepted_tokens)
  std::vector<long> accepted_per_pos;  // [block_size]: rounds whose accepted path reached position p (0-based)
  // Engine-specific gauges exported as treespark:<name> (e.g. the last round's batch, theta, tree size).
  std::vector<std::pair<std::string, double>> gauges;
  // Engine-specific monotone counters exported as treespark:<name>_total, Prometheus type counter.
  std::vector<std::pair<std::string, double>> counters;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual SubmitResult submit(BackendRequest request, EventSink sink) = 0;
  virtual void cancel(uint64_t id) = 0;
  // Refuses new submits (SubmitStatus::Draining) and blocks until every accepted request has sent its terminal
  // event.
  virtual void drain() = 0;
  virtual BackendMetrics metrics() const = 0;
};

}  // namespace ts::server
