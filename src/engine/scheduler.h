// The scheduler: a pure step function over a plain-data view of the requests (vLLM's schedule/update split).
//
//   Plan plan = schedule(state);          // reads state only
//   ... the runner executes plan on the models ...
//   update(state, plan, outcomes);        // applies what happened
//
// Each step, schedule():
//   1. evicts cancelled requests (their KV reservation is released by update());
//   2. admits waiting requests first come, first served while fewer than max_batch are admitted AND the request's
//      KV reservation fits the free KV budget; the first one that does not fit stops admission (a burst of long
//      prompts queues in order instead of exhausting memory);
//   3. gives every decoding request one decode entry (b = their count is the live batch);
//   4. hands out at most prefill_chunk prompt tokens, in admission order, to requests still prefilling, so a long
//      prompt is cut into chunks and never stalls the decoding requests for more than one chunk's cost;
//   5. prices each decoding request's tree for this step (cost_model.h): with a cost model and an adaptive
//      request, theta = max(theta floor, the price of the first node at batch b), and the set of adaptive requests
//      that speculate is the one with the best modelled token rate, tokens / (step_cost_ms(b, rows, drafting, the
//      requests' mean context) + the measured residuals below):
//      candidates are added most efficient first ((E - 1) / (k - 1) extra tokens per extra row) and every prefix
//      is priced, so speculation switches off (for some or all) exactly where it would cost goodput. E and k are
//      the request's measured tokens per round and tree size + 1 (before a measurement: the averages of its
//      temperature class, else E from the config's prior and k = 1 + min(node_cap, block_size / 2)). The
//      averages start from that prior counted as prior_rounds rounds: the newest of n measured rounds weighs
//      max(1 / (prior_rounds + n), the moving average's weight), so a few rounds replace a prior (trees at a busy
//      batch's price have 2-3 nodes, not the prior's 4) while one unlucky round moves it by a third. The moving
//      average's weight is 1 - (1 - ema_weight)^(1 + plain steps since the request's previous round): an estimate
//      ages with the steps it went unrefreshed. A class's averages weigh their newest round
//      max(1 / (prior_rounds + n), class_ema_weight). E is capped by the tokens the request may still emit, and
//      a request with one left is not a candidate. A request kept off is re-priced optimistically (at least its
//      class's E; the prior until the class is measured) after its probe interval of plain steps, so a stale
//      pessimistic measurement cannot keep it off for good. The interval starts at probe_interval, doubles (up to
//      max_probe_interval) after each such round that emits fewer tokens than that optimistic price (it confirms
//      the request is below its class), and starts over after one that emits as many, or after a round the
//      policy chose by the request's own price: under load, where a class-average round barely pays, a request
//      that stays poor is re-measured less and less often instead of every probe_interval steps.
//   6. explores: every price is learned, and a price learned wrong must not keep speculation off for good. When
//      adaptive requests have decoded plainly for probe interval steps in a row, the step is a probe: its most
//      efficient candidate speculates whatever the price says, and its round is measured like any other. The
//      interval starts at config.probe_interval, is reset when a probe measures a round cheaper than the estimate
//      it tested by at least 25% of it and 5% of the step's cost (less is a step's noise), and doubles (up to
//      max_probe_interval) after a probe that confirms the estimate. A round the policy chooses by price restarts
//      the count of plain steps, not the interval: under load, a busy batch's marginal requests that speculate now
//      and then would otherwise bring a probe every few steps. Where speculation truly does not pay, exploration
//      costs at most one round of one request every max_probe_interval + 1 steps.
//   7. measures the plain price too: the plain residual of a batch bucket is learned only from steps in which no
//      request drafts, so a policy that keeps speculating at a load would never learn that plain steps there cost
//      less than the curve says (a start-up measurement disturbed by a busy machine priced L(4, 1) at 1.6x a real
//      batch-4 step, and speculation ran at 0.93x plain decoding's throughput). When adaptive requests have
//      speculated plain_probe_interval steps in a row at a bucket whose plain residual is unmeasured, the steps run
//      plain (a plain probe; only when every drafting request is adaptive, so the step is wholly plain). A measured
//      price goes stale while the policy speculates (it may have been learned under conditions that pass, such as
//      the slow first decode steps after a prefill or an idle spell: docs/benchmarks.md), so it is re-measured
//      after plain_refresh_steps(gain) speculating steps, gain being the step's modelled gain over running plain:
//      a plain probe costs about that gain for each of its steps, so the policy spends at most kPlainProbeBudget
//      of its throughput on them, and re-measures most often where the decision is closest. A plain step right
//      after a drafting step still pays for it (where the weights live in a shared L3, the first plain steps after
//      a round cost more than settled ones, less and less: docs/benchmarks.md), so only a plain step that follows
//      at least kPlainSettleSteps wholly plain steps teaches the plain price, and a plain probe runs that many
//      steps before the one it measures. Learned from the unsettled steps, the plain price read high exactly where
//      speculation ran, and rounds that lost to settled plain decoding looked even. The speculating steps toward a
//      probe count from the last settled plain step, so where rounds and plain steps alternate the price is still
//      refreshed.
// The residuals (what each step costs beyond the modelled forward) are robust estimates: per live-batch bucket
// (1, 2-3, 4-7, 8-15, 16+) the lower median of the last ResidualWindow::kSize observations, after the process's
// first kResidualWarmupSteps plain steps and each bucket's first kResidualWarmupSteps drafting steps with each count
// of drafting requests (bucketed the same way) are dropped: cold caches, first touch, one-off table builds, and
// buffers that grow with the drafting requests (a residual learned from such a first step would keep speculation
// off where it pays). Plain steps warm up once per process: where the policy speculates, its plain probes are the
// only plain steps a bucket sees, and dropping them would leave an overpriced plain step unlearned (the runs behind
// both rules are in docs/benchmarks.md). One outlier moves neither, and a bucket not measured yet adds nothing (the
// policy then measures it).
// Nothing here touches a model: tests/engine/scheduler_test.cc drives it with a fake model.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "engine/request.h"
#include "engine/cost_model.h"

namespace ts::sched {

enum class Phase : uint8_t { Waiting, Prefill, Decode };

// The scheduler's view of one request.
struct SeqView {
  RequestId id = 0;
  Phase phase = Phase::Waiting;
  bool cancelled = false;
  int prompt_len = 0;        // tokens
  int prefilled = 0;         // prompt tokens already in the KV cache; while Waiting, those the engine's prefix
                             // cache would supply at admission (refreshed every step): prefill starts after them
  int context_len = 0;       // committed KV rows: prefilled prompt tokens + generated tokens fed back
  int max_context = 0;       // this request's context limit (prompt + generated), clamped by the engine
  int reserve_rows = 0;      // KV rows it may hold at once (context + one round's pending tree) less the rows it
                             // reads from shared blocks (counted in SchedulerState::shared_rows); reserved at admission
  // Decode policy inputs.
  DecodeMode mode = DecodeMode::None;
  bool adaptive = false;     // load-adaptive policy applies (engine cost model, request did not fix its pricing)
  float temperature = 0;
  double theta_floor = 0;    // the request's own theta (Tree mode)
  int node_cap = 0;          // max draft nodes per round (Chain: draft_len)
  // Measured while speculating (exponential moving averages over rounds); 0 = not measured yet.
  double tokens_per_round = 0;  // tokens emitted per round (accepted + bonus)
  double nodes_per_round = 0;   // draft nodes per round
  int rounds = 0;               // speculative rounds measured
  int steps_since_round = 0;    // decode steps since its last speculative round (policy probes, see schedule())
  int probe_interval = 0;       // plain steps before it is priced optimistically (schedule() step 5); 0: the config's
  // Tokens it may still emit (max_new_tokens less those emitted): a round emits at most this many, so E is priced
  // at most this, and a request with one left decodes plainly (its tree could only be discarded).
  int tokens_left = std::numeric_limits<int>::max();
};

struct SchedulerConfig {
  int max_batch = 8;             // admitted requests (prefilling + decoding) at once, >= 1
  int prefill_chunk = 256;       // prompt tokens per step over all prefilling requests, >= 1
  int64_t kv_budget_rows = 0;    // KV rows all admitted requests may reserve together, >= 1
  int block_size = 0;            // the drafter's block size (0: no drafter, nothing speculates)
  const CostModel* cost = nullptr;  // the measured L(b, k) and F(b); null: no adaptive policy
  // Tokens per round assumed before a request has been measured: [0] greedy, [1] sampled.
  double prior_tokens_per_round[2] = {2.5, 2.0};
  double ema_weight = 0.1;       // weight of the newest round in a request's moving averages
  double class_ema_weight = 0.02;  // the same over all requests of a temperature class (the prior of new ones)
  // Rounds a prior counts as (a new request's: its class's averages; a class's: the config's prior), so the
  // first measured rounds weigh 1 / (prior_rounds + n) until that falls to the moving averages' weights.
  double prior_rounds = 2;
  // A request the policy keeps from speculating gets one probe round after this many plain decode steps, so its
  // tokens per round stay measured and speculation comes back when it pays again (0 = never probe).
  int probe_interval = 8;
  // The longest the probe interval grows while probes keep confirming that speculation does not pay (step 6
  // above), >= probe_interval.
  int max_probe_interval = 64;
  // Speculating steps in a row at a batch bucket whose plain step cost is unmeasured (or stale, see
  // kPlainRefreshSteps) before one step runs plain to measure it (step 7 above; 0 = never).
  int plain_probe_interval = 16;
  // Forget what was learned across requests (class averages, exploration state, residuals) whenever the last
  // request leaves, so requests that do not overlap cannot change each other's decisions.
  bool forget_when_idle = false;
};

// A robust running estimate of one residual: the lower median of the last kSize observations (ring buffer).
struct ResidualWindow {
  static constexpr int kSize = 7;
  double values[kSize] = {};  // [kSize] the newest observations, oldest overwritten first
  int count = 0;              // observations held, <= kSize
  int next = 0;               // where the next one goes
  void add(double x);
  void keep_newest(int n);    // drops all but the n newest values
  double estimate() const;    // the lower median of the held values; 0 when none
};

// Residuals are kept per live-batch bucket: 1, 2-3, 4-7, 8-15, 16+.
constexpr int kBatchBuckets = 5;
int batch_bucket(int batch);
// The process's first plain steps, and a bucket's first drafting steps with each drafting-count bucket, teach
// nothing: they pay for cold caches and growing buffers.
constexpr int kResidualWarmupSteps = 2;
// Step 7 of schedule(): the share of the modelled throughput that plain probes may cost where a bucket's plain
// price is measured, and the longest a price goes unrefreshed (decode steps at that bucket with some request
// drafting since its last wholly plain step).
constexpr double kPlainProbeBudget = 0.005;
constexpr int kPlainRefreshSteps = 512;
// Wholly plain steps a plain step must follow (since the last step in which some request drafted) for its cost to
// teach the plain price; a plain probe is this many settling steps and then the measured one.
constexpr int kPlainSettleSteps = 3;
// The speculating steps after which a measured plain price is re-measured, at a modelled gain over plain decoding
// (best rate / plain rate - 1): (kPlainSettleSteps + 1) * gain / kPlainProbeBudget (a probe's steps each cost about
// the gain), within [plain_probe_interval, kPlainRefreshSteps].
int plain_refresh_steps(const SchedulerConfig& config, double gain);

struct SchedulerState {
  SchedulerConfig config;
  std::vector<SeqView> seqs;     // arrival order; update() removes finished and evicted requests
  int64_t step = 0;
  // KV rows of prefix-cache blocks that admitted requests read in place (shared, counted once; the engine sets it
  // each step). The admitted requests' reserve_rows then cover only their own rows.
  int64_t shared_rows = 0;
  // Moving averages over every speculative round of a temperature class ([0] greedy, [1] sampled); 0 = none yet.
  // A request not measured yet starts from these (then from the config's prior).
  double class_tokens_per_round[2] = {0, 0};
  double class_nodes_per_round[2] = {0, 0};
  int64_t class_rounds[2] = {0, 0};  // rounds measured per class
  // What the cost model leaves out, measured from the engine's own decode-only steps (observe_step), per batch
  // bucket: the ms every decode step takes beyond the modelled forward, and per drafting request the ms a round
  // takes beyond its modelled forward and F(n) (tree growth, verification, drafter context, bookkeeping). The
  // policy adds both to its prices, so a pair whose rounds cost more than the curve says stops speculating where
  // that loses goodput.
  ResidualWindow plain_residual[kBatchBuckets];
  ResidualWindow draft_residual[kBatchBuckets];  // per drafting request; < 0 where the curve overprices rounds
  // Steps offered to observe_step, warm-up included: plain ones, and drafting ones per batch bucket and bucket of
  // the drafting count.
  int plain_observed = 0;
  int draft_observed[kBatchBuckets][kBatchBuckets] = {};
  // Exploration (step 6 of schedule()).
  int steps_without_draft = 0;  // consecutive decode steps in which adaptive requests could speculate and none did
  int probe_interval = 0;       // the current interval; 0 = config.probe_interval
  // Per bucket: decode steps with some request drafting since a settled plain step (one that teaches the price).
  int steps_since_plain[kBatchBuckets] = {};
  // Per bucket: a plain step ended plain_probe_interval or more drafting steps there, so the plain residual's
  // older values describe conditions that may have passed: its next observation keeps only the window's newest
  // value beside it (the lower median of the two: one outlier cannot set the price).
  bool plain_window_stale[kBatchBuckets] = {};
  // Steps since the last one in which some request drafted (every step counts, prefill-only ones too); a fresh
  // state counts as settled.
  int steps_since_draft = kPlainSettleSteps;
  // Settling steps the current plain probe still runs before the step it measures (0: none running).
  int plain_probe_left = 0;
  // Counters for metrics: decode steps, those in which some request speculated, probes among them, and plain probes
  // (steps run plain to measure the plain price, step 7).
  int64_t decode_steps = 0, speculative_steps = 0, probe_steps = 0, plain_probe_steps = 0;
};

// One executed decode-only step, fed back: `batch` requests decoded, `drafting` of them speculated, the step took
// actual_ms where the cost model predicted modelled_ms (step_cost_ms for the rows it ran); `probe`: the plan's.
// modelled_plain_ms: what the model prices the same batch at with nobody drafting (step_cost_ms(b, b, 0)); it
// bounds the learned per-request residual from below, so a curve that overprices rounds can be corrected down to,
// never below, a plain step's price (0: the residual stays >= 0). plain_steps_before: wholly plain steps between
// the last drafting step and this one (SchedulerState::steps_since_draft before update()); a plain step with fewer
// than kPlainSettleSteps teaches nothing.
struct StepObservation {
  int batch = 0;
  int drafting = 0;
  bool probe = false;
  int plain_steps_before = kPlainSettleSteps;
  double actual_ms = 0, modelled_ms = 0, modelled_plain_ms = 0;
};
void observe_step(SchedulerState& state, const StepObservation& step);

// The residuals schedule() adds at this live batch: plain, per step; draft, per drafting request.
double plain_residual_ms(const SchedulerState& state, int batch);
double draft_residual_ms(const SchedulerState& state, int batch);

// KV rows reserved by admitted (Prefill / Decode) requests.
int64_t reserved_rows(const SchedulerState& state);

struct PrefillWork {
  RequestId id = 0;
  int start = 0;        // first prompt token of the chunk (= tokens already prefilled)
  int len = 0;          // tokens in the chunk, >= 1
  bool last = false;    // the chunk completes the prompt: its last row's logits give the first generated token
};

struct DecodeWork {
  RequestId id = 0;
  bool speculate = false;   // draft + verify this step; false: one plain token
  int pricing_batch = 1;    // the batch the adaptive theta prices nodes at (the live batch b)
  bool adaptive = false;    // expansion prices nodes with the engine's cost model at pricing_batch
  double theta = 0;         // the first node's threshold (logged; expansion recomputes it per node)
  // What the adaptive policy priced this request's round at (logged): expected tokens emitted (E) and rows
  // verified (k, anchor included); 0 when it was not priced (not adaptive, or no room to speculate).
  double priced_tokens = 0;
  int priced_rows = 0;
  bool probe_priced = false;  // priced optimistically: the request was due its probe (schedule() step 5)
};

struct Plan {
  int64_t step = 0;
  std::vector<RequestId> evict;       // cancelled requests: free their state now
  std::vector<RequestId> admit;       // Waiting -> Prefill in this step
  std::vector<PrefillWork> prefill;   // admission order
  std::vector<DecodeWork> decode;     // arrival order
  int batch = 0;                      // decode.size()
  double mean_context = 0;            // the decoding requests' committed tokens, averaged (what steps are priced at)
  int adaptive_candidates = 0;        // adaptive requests that could speculate this step
  bool policy_speculates = false;     // the policy chose speculation for some of them by price
  bool probe = false;                 // none paid, and one speculates to explore (schedule() step 6)
  bool plain_probe = false;           // speculation paid, and the step runs plain to measure the plain price (step 7):
                                      // one of a probe's settling steps, or the measured one
};

Plan schedule(const SchedulerState& state);

// What the runner reports for one request of the plan.
struct SeqOutcome {
  RequestId id = 0;
  int prefilled = 0;        // prompt tokens added to the cache (the chunk's length)
  int committed = 0;        // generated tokens whose KV rows were committed this step
  bool speculated = false;  // a round ran: tokens_emitted and tree_nodes update the moving averages
  int tokens_emitted = 0;   // tokens made final this step
  int tree_nodes = 0;       // draft nodes of this step's tree (root excluded)
  bool finished = false;    // stop, length, error: the request leaves and its reservation is freed
  int tokens_left = -1;     // tokens it may still emit after this step (SeqView::tokens_left); -1: unchanged
};

// Applies the plan and its outcomes: admitted requests become Prefill, finished prefills Decode, evicted and finished
// requests are removed (their KV reservation with them), counters and moving averages move.
void update(SchedulerState& state, const Plan& plan, const std::vector<SeqOutcome>& outcomes);

}  // namespace ts::sched
