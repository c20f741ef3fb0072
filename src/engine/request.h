// What a client hands the engine (a Request with its own options) and what it gets back (events carrying final
// tokens, a finish reason and the request's statistics). Shared by the step engine (engine.h), its thread-safe
// wrapper (async_engine.h), the single-request Generator (generator.h) and the server.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/cost_model.h"
#include "sampling/logprobs.h"
#include "sampling/sampling_params.h"
#include "spec_decode/calibration.h"
#include "spec_decode/expand.h"

namespace ts {

using RequestId = uint64_t;  // 0 is never a valid id

// Per-request options. (GenerateOptions in generator.h is this struct.)
struct RequestOptions {
  SamplingParams sampling;          // temperature, top_k, top_p, min_p, seed (each request has its own chooser)
  int max_new_tokens = 64;          // >= 0
  int max_context = 1 << 30;        // prompt + generated tokens; clamped to EngineConfig::max_context and the
                                    // model's max_position_embeddings
  std::vector<int32_t> stop_ids;    // generation ends after emitting one of these (the stop token is emitted)
  // Added to the target's raw logits before temperature / top-k / top-p / min-p, at every position, in every
  // mode (OpenAI's logit_bias: -100 practically bans a token, +100 practically forces it). Ids in [0, vocab),
  // biases finite and in [-100, 100]; a repeated id adds twice. The drafter's logits get the same bias (so drafts
  // follow it); speculation stays lossless with respect to the biased target (sampling/logit_adjust.h).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's min_tokens: until this many tokens have been generated, the stop_ids get -inf logits (cannot be
  // emitted; max_new_tokens and the context limit still end the request). In a draft tree the row of a node at
  // depth d predicts token number generated + d, so the mask is per depth. 0 = off; <= max_new_tokens.
  int min_tokens = 0;
  // Sampling penalties (sampling/penalties.h), applied after logit_bias and the min_tokens mask, before
  // temperature and the filters (vLLM v1's order). With c = the count of token t among the tokens this request has
  // generated (not the prompt): OpenAI's logit[t] -= frequency_penalty * c + presence_penalty * (c > 0), each in
  // [-2, 2] (positive discourages repeats); and vLLM's / HF's repetition_penalty in (0, 10] for every t in the
  // prompt or the generated tokens: logit[t] = logit[t] > 0 ? logit[t] / p : logit[t] * p (> 1 discourages,
  // 1 = off). In a draft tree each node's row counts the draft tokens on its own path as generated, so
  // speculation stays lossless with respect to the penalized target. Neutral values (0, 0, 1) cost nothing.
  float presence_penalty = 0;
  float frequency_penalty = 0;
  float repetition_penalty = 1;
  // -1: off. k in [0, 20]: every emitted token comes with its logprob and the k most likely alternatives
  // (RequestEvent::logprobs): log_softmax of the target's logits after ALL the edits above (logit_bias, the
  // min_tokens mask, the penalties), BEFORE temperature and the top-k / top-p / min-p filters, at any temperature
  // (vLLM's raw logprobs plus the request's edits; definition in sampling/logprobs.h). Speculation does not change
  // them: a token's values equal those of a plain (mode None) run over the same prefix.
  int logprobs = -1;
  // How the request decodes (spec_decode/decode_mode.h): plain, a chain, or a tree of one of three priorities.
  DecodeMode mode = DecodeMode::Tree;
  // The tree's shape: theta floor, node_cap, branch_cap (Tree modes), draft_len (Chain). The draft temperature and
  // filters follow `sampling`.
  spec_decode::TreeShape tree;
  // Set: this request's nodes are priced with this curve at a fixed batch (what `generate --load-batch B`
  // simulates) and the engine's own load-adaptive policy is not applied to it. node_ms: the per-node work outside
  // the forward (0: the engine's running estimate).
  struct FixedPricing {
    CostModel cost;
    int batch = 1;
    double node_ms = 0;
  };
  std::optional<FixedPricing> fixed_pricing;
  // Without fixed_pricing and with EngineConfig::cost_model set: the load-adaptive policy prices this request's
  // nodes at the live batch each round and may switch its speculation off (engine/cost_model.h). false: fixed theta.
  bool adaptive = true;
  bool collect_edges = false;       // keep verification edge records (calibration); delivered with the last event
  // The edge calibration for this request's trees; default: EngineConfig::calibration at sampling.temperature.
  std::optional<spec_decode::Calibration> calibration;
  // Refit the calibration's logit shifts (one per sibling-rank bucket) on this request's own verification labels
  // as it decodes (spec/calibration_online.h). false: the calibration above stays fixed (what `calibrate` collects
  // labels under).
  bool online_calibration = true;
};

struct Request {
  std::vector<int32_t> prompt;  // token ids, non-empty, each in [0, vocab)
  RequestOptions options;
};

// Statistics of one request. Times are wall-clock ms as this request saw them: a phase shared by a batched step
// (the drafter forward, the target forward) counts fully for every request in it.
struct RequestStats {
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;     // of which the prefix cache supplied (OpenAI usage.prompt_tokens_details.cached_tokens)
  int rounds = 0;                   // speculative rounds (a round = one draft + one verify)
  int target_forwards = 0;          // steps this request took part in (prefill chunks included)
  int generated_tokens = 0;
  int accepted_draft_tokens = 0;    // llama.cpp's draft_n_accepted
  long tree_nodes = 0;              // draft nodes over all rounds, root excluded (llama.cpp's draft_n)
  // Sum over rounds of the trees' calibrated path survivals (root excluded): the draft tokens the calibration
  // expected verification to accept. Beside accepted_draft_tokens it shows how well the calibration fits this
  // pair and temperature (the survivals are what the tree policy prices nodes with).
  double predicted_draft_tokens = 0;
  // The online calibration's logit shift per sibling-rank bucket after the last round (spec/calibration_online.h);
  // empty when the request kept its calibration fixed or ran no round.
  std::vector<double> calibration_shifts;
  double queue_ms = 0;              // from add() to admission
  double ttft_ms = 0;               // from add() to the first generated token
  double prefill_ms = 0, draft_ms = 0, expand_ms = 0, verify_ms = 0, total_ms = 0;
  std::vector<long> accepted_at_depth;  // [block_size + 1]: rounds whose accepted path had exactly d draft tokens
  std::vector<int> tree_sizes;          // [rounds]: nodes (root excluded) of each round's tree

  long draft_n() const { return tree_nodes; }
  long draft_n_accepted() const { return accepted_draft_tokens; }
  double tokens_per_round() const { return rounds ? double(accepted_draft_tokens + rounds) / rounds : 0; }
  double mean_tree_size() const { return rounds ? double(tree_nodes) / rounds : 0; }
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
// "stop", "length", "cancelled", "error" ("" for None).
const char* finish_reason_name(FinishReason reason);

// One event per step in which the request produced tokens or ended. The final event (finish != None) comes exactly
// once; after it the request is gone and its KV memory is free.
struct RequestEvent {
  RequestId id = 0;
  std::vector<int32_t> tokens;      // tokens that became final in this step, in order (may be empty)
  std::vector<TokenLogprobs> logprobs;  // [tokens.size()] with RequestOptions::logprobs >= 0, else empty
  FinishReason finish = FinishReason::None;
  std::string error;                // finish == Error: what went wrong
  const RequestStats* stats = nullptr;                  // valid during the callback only
  const std::vector<spec_decode::EdgeRecord>* edges = nullptr; // final event with collect_edges; valid during the callback
};
// Called on the thread that runs Engine::step() (the AsyncEngine's loop thread). It must not block for long and
// must not call back into the Engine (AsyncEngine::submit/cancel are fine). A callback that throws fails only its
// own request: its state is freed and the callback gets one last event (finish Error, with the exception's
// message), whose own exceptions are ignored.
using EventCallback = std::function<void(const RequestEvent&)>;

enum class RejectReason {
  None,
  BadParams,    // out-of-range sampling/tree parameters (logit_bias, min_tokens, penalties, logprobs included),
                // bad token ids, empty prompt, mode needs a drafter
  OverContext,  // the prompt does not fit the context limit (or one request's KV alone exceeds the KV budget)
  QueueFull,    // more than EngineConfig::max_queue requests waiting
  Draining,     // AsyncEngine::drain() was called: no new requests
};
const char* reject_reason_name(RejectReason reason);  // "bad_params", "over_context", "queue_full", "draining"

// What a submit answers (AsyncEngine::submit, and the server's Backend seam that forwards to it).
struct SubmitResult {
  RequestId id = 0;                          // valid when ok()
  RejectReason reason = RejectReason::None;
  std::string message;                       // why it was rejected, for the client
  bool ok() const { return reason == RejectReason::None; }
};

// Thrown by Engine::add for a request it will not take; what() says why in words a client can read.
class RequestRejected : public Error {
 public:
  RequestRejected(RejectReason reason, const std::string& message) : Error(message), reason_(reason) {}
  RejectReason reason() const { return reason_; }

 private:
  RejectReason reason_;
};

}  // namespace ts
