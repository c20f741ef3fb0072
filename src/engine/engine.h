// The step engine: many requests, each with its own sampling parameters, stop ids, max tokens, decode mode and
// tree parameters, its own target KV cache and drafter state, decoded together.
//
// One step() = schedule (scheduler.h, a pure function) + one run + update:
//   1. one batched drafter forward over every speculating request's block (Drafter::draft_blocks);
//   2. tree growth per request (spec_decode::expand), priced at the live batch by the load-adaptive theta;
//   3. ONE target forward over the ragged concatenation of every request's rows: prefill chunks (causal) and
//      [anchor + tree] (ancestor mask), each sequence seeing only its own cache;
//   4. per request: verification (spec_decode::verify), KV compaction of the accepted path, drafter context extension,
//      token events.
// A failure inside the batched forwards re-runs the step's requests one at a time, so an exception fails only the
// request that raised it. The single-request Generator (generator.h) is a client of this class.
//
// KV memory is a budget: admission reserves each request's worst case (context limit + one round's tree rows, in
// target + drafter bytes) so a burst of long prompts queues instead of running out of memory; usage is exposed.
// The prefix cache's blocks share the budget: between steps, reservations plus cached blocks never exceed it.
//
// Not thread-safe: one thread calls add/cancel/step. async_engine.h wraps it for serving.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/cost_model.h"
#include "engine/kv_events.h"
#include "engine/metrics.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/drafter.h"
#include "model/target_model.h"
#include "spec_decode/calibration_file.h"
#include "spec_decode/round.h"

namespace ts {

struct EngineConfig {
  int max_batch = 8;           // requests admitted (prefilling or decoding) at once
  int max_queue = 64;          // requests waiting beyond those: add/submit reject with QueueFull once
                               // max_batch + max_queue requests are in progress (queued or running)
  int max_context = 4096;      // prompt + generated tokens per request (clamped to the model's positions)
  int prefill_chunk = 256;     // prompt tokens prefilled per step, over all requests
  // KV memory all admitted requests may reserve together, bytes. 0 = enough for max_batch requests at max_context.
  int64_t kv_budget_bytes = 0;
  // The measured cost curve L(b, k) and drafter cost F(b) (cost_model.h): enables the load-adaptive policy for
  // requests with options.adaptive. Unset: every request uses its own fixed theta and always speculates.
  std::optional<CostModel> cost_model;
  // Tokens per round the policy assumes for a request before it (or its temperature class) has been measured:
  // [0] greedy, [1] sampled (scheduler.h). A long-running engine soon replaces them with its own averages.
  double prior_tokens_per_round[2] = {2.5, 2.0};
  // Speculating steps in a row at a load whose plain step is unmeasured before one runs plain to measure it
  // (scheduler.h, step 7; 0 = never).
  int plain_probe_interval = sched::SchedulerConfig{}.plain_probe_interval;
  // false (default): the policy learns as it runs what steps cost beyond the cost curve and how many tokens a
  // round yields per temperature class (scheduler.h), across requests. true: prices come from the cost curve
  // alone and whatever the policy learned is forgotten whenever no request is in the engine, so a request's tree
  // shapes depend only on the curve, the calibration, the request and the requests beside it -- never on step
  // timings or on earlier requests -- and a seeded request's sample repeats, across restarts too, when it runs
  // alone under the same curve.
  bool deterministic_trees = false;
  // The prefix cache (engine/prefix_cache.h): a request whose prompt starts with blocks of tokens that an earlier
  // request's context held (a shared system prompt, the previous turns of a chat) reads their target KV rows and
  // drafter context rows in place instead of computing them. Blocks of prefix_block_tokens tokens (a multiple of
  // 16: blocks are read as the attention kernel's key tiles); they live in the KV budget beside the admitted
  // requests' own reservations, counted once however many requests read them, and unpinned blocks are evicted least
  // recently used to make room.
  bool prefix_cache = true;
  int prefix_block_tokens = 16;
  // Token ids the engine may emit: [0, emit_vocab); 0 = the whole model vocabulary. A checkpoint whose embedding
  // rows are padded past its tokenizer (Qwen's 151936 rows for 151669 ids) has ids the tokenizer cannot print: with
  // emit_vocab set to the tokenizer's size their logits are -inf in every target row before any other edit, and in
  // the drafter's q, so they are never sampled and speculation stays lossless with respect to that masked
  // distribution. ModelBundle::emit_vocab() gives the value for a model folder's tokenizer.
  int emit_vocab = 0;
  // Edge calibration per temperature (a request's options.calibration overrides it).
  spec_decode::CalibrationTable calibration;
  // Called at the end of every step with what the step did (per-request theta and tree sizes), on the stepping
  // thread; for logs and plots of the policy.
  std::function<void(const StepReport&)> on_step;
  // Called at the end of a step in which the prefix cache stored or removed blocks (kv_events.h), on the stepping
  // thread, events in the order they happened; for prefix-aware routers (`serve --kv-events`).
  std::function<void(const std::vector<KvCacheEvent>&)> on_kv_events;
};

class Engine {
 public:
  // drafter may be null: then only DecodeMode::None requests are accepted. Checks that the pair matches.
  Engine(TargetModel& target, Drafter* drafter, EngineConfig config = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return config_; }
  int max_context() const { return max_context_; }  // after clamping to the model

  // Throws RequestRejected (BadParams / OverContext) unless the request could ever run; reads only the config and
  // the models' shapes, so it is safe to call from any thread while another steps.
  void validate(const Request& request) const;

  // Validates (as above), checks the queue (QueueFull when max_batch + max_queue requests are already in progress)
  // and queues the request.
  // id: 0 = the engine picks one; otherwise a fresh id chosen by the caller (AsyncEngine hands ids out itself).
  // on_event may be null. Returns the id.
  RequestId add(Request request, EventCallback on_event, RequestId id = 0);

  // Ends the request at the start of the next step: its final event (Cancelled) is sent then, and its KV memory
  // freed. Unknown or finished ids are ignored.
  void cancel(RequestId id);
  void cancel_all();  // cancel() for every queued and running request

  bool idle() const;          // nothing waiting or running
  int num_waiting() const;
  int num_running() const;

  // One scheduler step and one run of its plan. Returns what it did (also passed to EngineConfig::on_step).
  StepReport step();

  EngineMetrics metrics() const;
  const PrefixCache* prefix_cache() const { return prefix_cache_.get(); }  // null when off

  // KV bytes one token row costs (target + drafter caches), and the budget in rows.
  int64_t kv_bytes_per_row() const { return kv_bytes_per_row_; }

 private:
  struct Live;  // one request's models' state: caches, chooser, tree options, stats
  class Runner;

  struct Item;   // one request's work in a step (engine_run.cc)

  // Admission of the plan's requests: each gets its caches, reading the rows of its prefix-cache hit in place.
  void admit_all(const std::vector<RequestId>& ids);
  // What a request's prompt finds in the prefix cache: whole blocks it reads in place, then the rows of a tail (or of
  // a block that diverges mid-way) it copies.
  struct CacheHit {
    std::vector<const PrefixCache::Block*> blocks;
    PrefixCache::Tail tail;
    std::vector<const PrefixCache::Block*> all() const;  // blocks, then the tail's block if any
  };
  // Returns the milliseconds spent allocating the request's own caches (work the prefix cache does not add).
  double admit(Live& live, const CacheHit& hit);
  // The prefix cache's part of the step: what each waiting request would find there (its SeqView's prefilled),
  // storing a request's whole blocks (after its prompt, and when it ends), and the row limit it keeps to.
  CacheHit cache_hit(const Live& live) const;
  void refresh_cached_prefixes();
  // Pins blocks for the request and appends their rows to its caches as shared rows (before any of its own).
  void share_blocks(Live& live, const std::vector<const PrefixCache::Block*>& blocks);
  // Copies a tail's rows into the request's caches as its first own rows (the caller pins the tail's block).
  void copy_tail(Live& live, const PrefixCache::Tail& tail);
  // Frees the pools' chunks that hold no entry (after evictions).
  void release_unused_chunks();
  // A request leaves the engine: its shared blocks are unpinned, its state freed.
  void forget(std::unordered_map<RequestId, std::unique_ptr<Live>>::iterator it);
  void store_prefix(Live& live);
  int64_t prefix_cache_limit_rows(const Live* leaving) const;
  // Executes the plan's model work (engine_run.cc): fills one outcome per request that took part.
  void run(const sched::Plan& plan, StepReport& report, std::vector<sched::SeqOutcome>& outcomes);
  // run()'s phases, in order.
  void plan_items(const sched::Plan& plan, std::deque<Item>& items, std::vector<Item*>& spec_items,
                  StepReport& report, std::vector<sched::SeqOutcome>& outcomes);
  // One batched drafter forward (runner_->base_logits); first the drafter context catches up with the rows its
  // requests committed since their last round (report.backlog_rows / backlog_ms).
  void draft_blocks(const std::vector<Item*>& spec_items, StepReport& report);
  void grow_trees(const std::vector<Item*>& spec_items, StepReport& report);
  void grow_tree(Item& item, const float* base_logits);   // the item's Round, drafted; base_logits [block, vocab]
  void forward_all(std::deque<Item>& items, std::deque<ForwardResult>& results, StepReport& report);
  void forward_items(std::vector<Item*>& items, ForwardResult& result, bool want_taps);
  void finish_all(std::deque<Item>& items, StepReport& report, std::vector<sched::SeqOutcome>& outcomes);
  void finish_item(Item& item, sched::SeqOutcome& outcome);
  void record_round(Live& live, const spec_decode::RoundOutcome& round);  // stats, metrics, online calibration
  void flush_taps(Live& live);  // the drafter context catches up with the committed tokens
  // Appends a generated token; ends the request on a stop id or max_new_tokens. No-op once done.
  // logits: [vocab] the edited target row the token was chosen from (its logprobs, when the request wants them).
  void emit(Live& live, int32_t token, const float* logits);
  void fail(Live& live, const std::string& message);
  // Sends the step's event (tokens and, when done, the finish); a throwing callback fails the request.
  void deliver(Live& live);

  TargetModel& target_;
  Drafter* drafter_;
  EngineConfig config_;
  int max_context_ = 0;
  int64_t kv_bytes_per_row_ = 0;
  sched::SchedulerState sched_;
  // Tree growth per draft node (expansion's ms / nodes over recent rounds after the first two, a robust window):
  // the per-node work outside the target forward that adaptive trees price (round_cost_ms's node_ms).
  sched::ResidualWindow node_work_ms_;
  int64_t node_work_rounds_ = 0;  // rounds offered to node_work_ms_, the warm-up ones included
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  RequestId next_id_ = 1;
  EngineMetrics metrics_;
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when off
  // The prefix cache's rows: slot s of the cache holds block-tokens rows of each pool, written by store_prefix and
  // read in place by the requests that share them (block_pool.h).
  BlockPool target_pool_;   // the target's KV
  BlockPool drafter_pool_;  // the drafter's context (with a drafter)
};

}  // namespace ts
