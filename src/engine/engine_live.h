// Internal to the engine (engine.cc, engine_run.cc): one request's live state and the runner's scratch.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "sampling/chooser.h"
#include "sampling/penalties.h"
#include "spec_decode/calibration_online.h"
#include "spec_decode/draft_tree.h"

namespace ts {

struct Engine::Live {
  RequestId id = 0;
  Request request;               // prompt and options as submitted
  EventCallback on_event;
  int max_context = 0;           // clamped context limit
  int context_rows = 0;          // context tokens it can ever hold: min(prompt + max_new_tokens, max_context)
  int reserve_rows = 0;          // KV rows reserved at admission: context_rows + tree rows (the cache's max_tokens)
  bool speculative = false;      // mode != None: keeps a drafter state fed with the target's taps
  spec_decode::TreeParams tree;         // expansion parameters (mode and branch cap fixed for Chain, temperature set)
  spec_decode::OnlineCalibration calibration;  // the request's (or the engine's) calibration, refitted as it decodes

  std::vector<uint64_t> prompt_chain;  // the prefix cache's names of the prompt's whole blocks (empty when off)
  bool admitted = false;
  bool prefill_started = false;  // a prefill chunk was planned: its cache holds computed rows

  // Allocated at admission.
  KVCache cache;                 // target KV: committed rows = prompt + generated tokens fed back
  // Prefix-cache blocks whose rows its caches read in place (KVCache::share_rows), in order; pinned (acquired) until
  // the request leaves the engine (Engine::forget).
  std::vector<const PrefixCache::Block*> shared_blocks;
  DrafterState drafter_state;
  std::unique_ptr<RandomChooser> chooser;

  // Target taps of committed tokens not yet in the drafter's context: extending it one token at a time while the
  // request decodes plainly (prefill, no room, policy off) would cost a drafter call per token, so the rows wait
  // here and enter in one call before the next draft, or when kMaxTapBacklog rows have piled up. A request the
  // policy keeps off (a small target at high load) then never pays for a drafter context it does not use, and a
  // probe enters the backlog in one batched call (per row about half the cost of one-row calls).
  std::vector<float> tap_backlog;          // [rows, tap_width]
  std::vector<int32_t> backlog_positions;  // [rows]
  int32_t anchor = -1;           // newest token: emitted, not yet in the cache
  std::vector<int32_t> generated;
  // Token counts the sampling penalties read (prompt with repetition_penalty, generated), updated by emit();
  // inactive (empty, never read) when the request's three penalties are neutral.
  PenaltyHistory penalties;
  std::vector<int32_t> step_tokens;  // tokens made final in the current step (sent as one event)
  std::vector<TokenLogprobs> step_logprobs;  // [step_tokens.size()] with options.logprobs >= 0, else empty
  FinishReason finish = FinishReason::None;
  std::string error;
  RequestStats stats;
  std::vector<spec_decode::EdgeRecord> edges;
  double t_add_ms = 0;           // when add() queued it
  double t_last_tokens_ms = 0;   // when its previous tokens became final (inter-token latency)
  bool done() const { return finish != FinishReason::None; }
  // Tokens it may still emit: max_new_tokens less those emitted (the scheduler's SeqView::tokens_left).
  int tokens_left() const { return std::max(0, request.options.max_new_tokens - int(generated.size())); }
};

// [kMaxTapBacklog, tap_width] f32 at most per request: 6 MB for a 512-wide target with 3 taps.
constexpr int kMaxTapBacklog = 1024;

// Scratch of the runner, reused between steps.
class Engine::Runner {
 public:
  std::vector<float> base_logits;  // [speculating requests, block_size, vocab]
  std::vector<double> probs;       // [vocab] sampling scratch
};

}  // namespace ts
