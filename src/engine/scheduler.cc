#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"

namespace ts::sched {

int64_t reserved_rows(const SchedulerState& state) {
  int64_t rows = state.shared_rows;
  for (const SeqView& s : state.seqs)
    if (s.phase != Phase::Waiting) rows += s.reserve_rows;
  return rows;
}

void ResidualWindow::add(double x) {
  values[next] = x;
  next = (next + 1) % kSize;
  count = std::min(count + 1, kSize);
}

void ResidualWindow::keep_newest(int n) {
  n = std::clamp(n, 0, std::min(count, kSize));
  double newest[kSize];  // [n] oldest first
  for (int i = 0; i < n; ++i) newest[i] = values[(next - n + i + kSize) % kSize];
  count = next = 0;
  for (int i = 0; i < n; ++i) add(newest[i]);
}

double ResidualWindow::estimate() const {
  // count <= kSize always; saying so lets the compiler see the sort stays inside `sorted` (-Warray-bounds).
  const int n = std::min(count, kSize);
  if (n <= 0) return 0;
  double sorted[kSize];
  std::copy(values, values + n, sorted);
  std::sort(sorted, sorted + n);
  return sorted[(n - 1) / 2];  // the lower median: with two values, the smaller (the policy then measures)
}

int batch_bucket(int batch) {
  int bucket = 0;
  for (int b = std::max(1, batch); b > 1 && bucket + 1 < kBatchBuckets; b >>= 1) ++bucket;
  return bucket;
}

double plain_residual_ms(const SchedulerState& state, int batch) {
  return state.plain_residual[batch_bucket(batch)].estimate();
}

double draft_residual_ms(const SchedulerState& state, int batch) {
  return state.draft_residual[batch_bucket(batch)].estimate();
}

int plain_refresh_steps(const SchedulerConfig& config, double gain) {
  const double steps = (1 + kPlainSettleSteps) * std::max(0.0, gain) / kPlainProbeBudget;
  return int(std::min(std::max(steps, double(config.plain_probe_interval)), double(kPlainRefreshSteps)));
}

namespace {

int current_probe_interval(const SchedulerState& st) {
  return st.probe_interval > 0 ? st.probe_interval : st.config.probe_interval;
}

int request_probe_interval(const SchedulerConfig& c, const SeqView& s) {
  return s.probe_interval > 0 ? s.probe_interval : c.probe_interval;
}

bool can_speculate(const SchedulerConfig& c, const SeqView& s) {
  // A round needs room for a whole block after the anchor (the anchor sits at position context_len), and a second
  // token to emit: with one left, the round's bonus token is all it could keep.
  return s.mode != DecodeMode::None && c.block_size > 0 && s.context_len + c.block_size + 1 <= s.max_context &&
         s.tokens_left >= 2;
}

// The round's tokens per sequence the request is expected to verify (anchor included) and emit.
void expectations(const SchedulerState& st, const SeqView& s, int* k, double* tokens) {
  const SchedulerConfig& c = st.config;
  const int cls = s.temperature > 0 ? 1 : 0;
  double nodes = s.nodes_per_round > 0 ? s.nodes_per_round : st.class_nodes_per_round[cls];
  if (nodes <= 0) nodes = std::max(1, std::min(s.node_cap, c.block_size / 2));
  *k = 1 + int(nodes + 0.5);
  *tokens = s.tokens_per_round > 0                ? s.tokens_per_round
            : st.class_tokens_per_round[cls] > 0 ? st.class_tokens_per_round[cls]
                                                  : c.prior_tokens_per_round[cls];
  *tokens = std::min(*tokens, double(s.tokens_left));  // a round emits no more than the request may still emit
}

}  // namespace

namespace {

// An adaptive request that may speculate this step: what its round would add over a plain step.
struct Candidate {
  size_t index;         // into plan.decode
  int extra_rows;       // k - 1 tree rows
  double extra_tokens;  // expected tokens per round - 1
};

// The rows, expected tokens and drafting requests of the step before any adaptive candidate joins.
struct SpeculationBase {
  double rows = 0, tokens = 0;
  int drafting = 0;
};

// Evictions (cancelled requests) and admissions, first come, first served.
void plan_admission(const SchedulerState& state, Plan& plan) {
  const SchedulerConfig& c = state.config;
  int admitted = 0;
  int64_t reserved = state.shared_rows;
  for (const SeqView& s : state.seqs) {
    if (s.cancelled) {
      plan.evict.push_back(s.id);
    } else if (s.phase != Phase::Waiting) {
      ++admitted;
      reserved += s.reserve_rows;
    }
  }
  // Admission: first come, first served; the first request that does not fit stops it (no overtaking, so a long
  // prompt is not starved by short ones behind it).
  for (const SeqView& s : state.seqs) {
    if (s.cancelled || s.phase != Phase::Waiting) continue;
    if (admitted >= c.max_batch || reserved + s.reserve_rows > c.kv_budget_rows) break;
    plan.admit.push_back(s.id);
    ++admitted;
    reserved += s.reserve_rows;
  }

}

void plan_prefill(const SchedulerState& state, Plan& plan) {
  // Prefill chunks, in arrival order (admitted ones first come earlier in seqs than newly admitted ones).
  int budget = std::max(1, state.config.prefill_chunk);
  for (const SeqView& s : state.seqs) {
    if (budget == 0) break;
    if (s.cancelled) continue;
    const bool newly = s.phase == Phase::Waiting &&
                       std::find(plan.admit.begin(), plan.admit.end(), s.id) != plan.admit.end();
    if (s.phase != Phase::Prefill && !newly) continue;
    const int remaining = s.prompt_len - s.prefilled;
    if (remaining <= 0) continue;
    const int len = std::min(remaining, budget);
    plan.prefill.push_back({s.id, s.prefilled, len, len == remaining});
    budget -= len;
  }

}

// Decode entries: every decoding request, priced at the live batch. Fills the rows and tokens of the requests that
// always speculate or never do (base_*), and returns the adaptive ones as candidates for choose_speculating.
std::vector<Candidate> plan_decode(const SchedulerState& state, Plan& plan, SpeculationBase& base) {
  const SchedulerConfig& c = state.config;
  std::vector<const SeqView*> views;
  for (const SeqView& s : state.seqs)
    if (!s.cancelled && s.phase == Phase::Decode) {
      plan.decode.push_back({s.id});
      views.push_back(&s);
    }
  plan.batch = int(plan.decode.size());
  double& mean_context = plan.mean_context;  // the step's context term
  for (const SeqView* v : views) mean_context += v->context_len;
  if (!views.empty()) mean_context /= double(views.size());
  // Which adaptive requests speculate: the step's modelled token rate (step_cost_ms) decides. Requests that
  // always speculate (no cost model, or their own fixed pricing) and plain ones make the base; adaptive ones are
  // added most efficient first ((E - 1) / (k - 1)), and the prefix with the best rate wins (evaluating every
  // prefix, not only the next request, because the drafter's batched cost F(n) is not linear in n). A request due
  // a probe is priced with its class's tokens per round if that beats its own (stale) measurement.
  std::vector<Candidate> candidates;
  base.rows = plan.batch;
  base.tokens = plan.batch;
  for (size_t i = 0; i < views.size(); ++i) {
    const SeqView& s = *views[i];
    DecodeWork& w = plan.decode[i];
    w.pricing_batch = std::max(1, plan.batch);
    w.speculate = can_speculate(c, s);
    w.theta = is_tree(s.mode) ? s.theta_floor : 0;
    if (!w.speculate) continue;
    int k = 1;
    double tokens = 1;
    expectations(state, s, &k, &tokens);
    if (!s.adaptive || !c.cost) {
      base.rows += k - 1;
      base.tokens += tokens - 1;
      ++base.drafting;
      continue;
    }
    w.adaptive = true;
    if (is_tree(s.mode))
      w.theta = std::max(s.theta_floor, adaptive_theta(*c.cost, w.pricing_batch, 1, 1.0, s.context_len));
    w.speculate = false;  // decided below
    if (c.probe_interval > 0 && s.steps_since_round >= request_probe_interval(c, s)) {
      // Probe: price it optimistically (its class's tokens per round, or the prior before the class has any)
      // rather than with its own stale measurement; if even that does not pay at this load, no probe is wasted.
      const int cls = s.temperature > 0 ? 1 : 0;
      const double class_tokens =
          state.class_tokens_per_round[cls] > 0 ? state.class_tokens_per_round[cls] : c.prior_tokens_per_round[cls];
      tokens = std::min(std::max(tokens, class_tokens), double(s.tokens_left));
      w.probe_priced = true;
    }
    w.priced_tokens = tokens;
    w.priced_rows = k;
    candidates.push_back({i, k - 1, tokens - 1});
  }
  return candidates;
}

// Which adaptive candidates speculate: the prefix (most efficient first) with the best modelled token rate.
void choose_speculating(const SchedulerState& state, Plan& plan, std::vector<Candidate>& candidates,
                        const SpeculationBase& base) {
  const SchedulerConfig& c = state.config;
  const double mean_context = plan.mean_context;
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.extra_tokens * std::max(1, b.extra_rows) > b.extra_tokens * std::max(1, a.extra_rows);
  });
  double rows = base.rows, tokens = base.tokens, best_rate = -1, plain_rate = 0;
  size_t best = 0;
  const double plain_extra = plain_residual_ms(state, plan.batch);
  const double draft_extra = draft_residual_ms(state, plan.batch);
  for (size_t j = 0; j <= candidates.size(); ++j) {
    const int drafting = base.drafting + int(j);
    const double step_ms =
        step_cost_ms(*c.cost, plan.batch, rows, drafting, mean_context) + plain_extra + drafting * draft_extra;
    const double rate = tokens / std::max(step_ms, 1e-6);
    if (j == 0) plain_rate = rate;  // no candidate drafts: plain for the policy's requests
    if (rate > best_rate) best_rate = rate, best = j;
    if (j < candidates.size()) {
      rows += candidates[j].extra_rows;
      tokens += candidates[j].extra_tokens;
    }
  }
  plan.adaptive_candidates = int(candidates.size());
  plan.policy_speculates = best > 0;
  // Step 7: a bucket whose plain price is unmeasured or stale gets a plain probe; the smaller the modelled gain, the
  // sooner a price counts as stale. Only when no request outside the policy drafts anyway: a step with some
  // drafting cannot measure it. A probe under way runs its settling steps plain (and explores nothing meanwhile).
  if (state.plain_probe_left > 0 && base.drafting == 0) {
    plan.plain_probe = best > 0;
    return;
  }
  const int bucket = batch_bucket(plan.batch);
  const int since_plain = state.steps_since_plain[bucket];
  const double gain = best_rate / std::max(plain_rate, 1e-12) - 1;
  if (best > 0 && base.drafting == 0 && c.plain_probe_interval > 0 && since_plain >= c.plain_probe_interval &&
      (state.plain_residual[bucket].count == 0 || since_plain >= plain_refresh_steps(c, gain))) {
    plan.plain_probe = true;
    return;
  }
  // Exploration: nothing paid for probe_interval steps in a row, so the most efficient candidate speculates
  // anyway and its round re-measures the prices that kept it off.
  const int interval = current_probe_interval(state);
  if (best == 0 && interval > 0 && state.steps_without_draft >= interval) {
    best = 1;
    plan.probe = true;
  }
  for (size_t j = 0; j < best; ++j) plan.decode[candidates[j].index].speculate = true;
}

}  // namespace

Plan schedule(const SchedulerState& state) {
  Plan plan;
  plan.step = state.step;
  plan_admission(state, plan);
  plan_prefill(state, plan);
  SpeculationBase base;
  std::vector<Candidate> candidates = plan_decode(state, plan, base);
  if (!candidates.empty()) choose_speculating(state, plan, candidates, base);
  return plan;
}

void observe_step(SchedulerState& state, const StepObservation& step) {
  if (!(step.actual_ms > 0) || !(step.modelled_ms > 0) || step.batch < 1) return;
  const int bucket = batch_bucket(step.batch);
  const double residual = step.actual_ms - step.modelled_ms;
  if (step.drafting == 0) {
    // The process's first plain steps are warm-up, settled or not; an unsettled one still pays for the drafting
    // before it.
    const bool warm = state.plain_observed++ >= kResidualWarmupSteps;
    if (warm && step.plain_steps_before >= kPlainSettleSteps) {
      ResidualWindow& window = state.plain_residual[bucket];
      if (state.plain_window_stale[bucket]) window.keep_newest(1);
      state.plain_window_stale[bucket] = false;
      window.add(residual);
    }
    return;
  }
  // Negative where rounds cost less than the curve says, down to the price of the same step run plain.
  const double floor =
      step.modelled_plain_ms > 0 ? -std::max(0.0, step.modelled_ms - step.modelled_plain_ms) / step.drafting : 0.0;
  const double per_request = std::max(floor, (residual - plain_residual_ms(state, step.batch)) / step.drafting);
  const double estimate_before = draft_residual_ms(state, step.batch);
  const bool held_before = state.draft_residual[bucket].count > 0;
  if (state.draft_observed[bucket][batch_bucket(step.drafting)]++ >= kResidualWarmupSteps)
    state.draft_residual[bucket].add(per_request);
  if (!step.probe) return;
  // A probe that found rounds clearly cheaper than the estimate it tested looks again soon; one that confirmed it
  // (within noise) backs off, so where speculation does not pay the probes' cost shrinks toward one round per
  // max_probe_interval steps however noisy the rounds are. Clearly: by more than kProbeRelief of the estimate and
  // more than kStepNoise of the step's modelled cost (per drafting request): a small estimate (a round that costs
  // little beyond the curve) is not refuted by a step that ran a few percent fast.
  constexpr double kProbeRelief = 0.25, kStepNoise = 0.05;
  const SchedulerConfig& c = state.config;
  const double slack = std::max(kProbeRelief * std::abs(estimate_before),  // estimates may be negative (see above)
                                kStepNoise * step.modelled_ms / step.drafting);
  if (held_before && per_request >= estimate_before - slack) {
    state.probe_interval = std::min(std::max(c.probe_interval, c.max_probe_interval), 2 * current_probe_interval(state));
  } else {
    state.probe_interval = c.probe_interval;
  }
}

void update(SchedulerState& state, const Plan& plan, const std::vector<SeqOutcome>& outcomes) {
  std::unordered_map<RequestId, size_t> index;
  for (size_t i = 0; i < state.seqs.size(); ++i) index[state.seqs[i].id] = i;
  auto find = [&](RequestId id) -> SeqView* {
    auto it = index.find(id);
    return it == index.end() ? nullptr : &state.seqs[it->second];
  };
  std::vector<RequestId> gone(plan.evict.begin(), plan.evict.end());
  for (RequestId id : plan.admit)
    if (SeqView* s = find(id); s && s->phase == Phase::Waiting) s->phase = Phase::Prefill;
  // Exploration bookkeeping (schedule() step 6), the plain probe's settling steps (step 7) and the step counters.
  bool drafted = false;
  for (const DecodeWork& d : plan.decode) drafted |= d.speculate;
  const bool settled_plain = !drafted && state.steps_since_draft >= kPlainSettleSteps;  // one that teaches the price
  state.steps_since_draft = drafted ? 0 : std::min(state.steps_since_draft + 1, 1 << 20);
  if (drafted) {
    state.plain_probe_left = 0;  // the probe was cut short: its next step would measure nothing
  } else if (plan.batch > 0 && (plan.plain_probe || state.plain_probe_left > 0)) {
    state.plain_probe_left = state.plain_probe_left > 0 ? state.plain_probe_left - 1 : kPlainSettleSteps;
  }
  if (plan.batch > 0) {
    ++state.decode_steps;
    state.speculative_steps += drafted;
    state.probe_steps += plan.probe;
    state.plain_probe_steps += plan.plain_probe;
    const int bucket = batch_bucket(plan.batch);
    int& since_plain = state.steps_since_plain[bucket];
    const int interval = state.config.plain_probe_interval;
    if (!drafted && interval > 0 && since_plain >= interval) state.plain_window_stale[bucket] = true;
    // Unsettled plain steps teach nothing, so they leave the count: where rounds and plain steps alternate, the
    // price is still refreshed (by a probe) after so many speculating steps.
    if (drafted) ++since_plain;
    if (settled_plain) since_plain = 0;
  }
  if (plan.policy_speculates || plan.probe) {
    state.steps_without_draft = 0;
  } else if (plan.adaptive_candidates > 0) {
    ++state.steps_without_draft;
  }
  const double w = state.config.ema_weight;
  std::unordered_map<RequestId, const DecodeWork*> work_of;
  for (const DecodeWork& d : plan.decode) work_of[d.id] = &d;
  for (const SeqOutcome& o : outcomes) {
    SeqView* s = find(o.id);
    if (!s) continue;
    if (o.prefilled > 0) {
      s->prefilled += o.prefilled;
      s->context_len += o.prefilled;
      TS_CHECK(s->prefilled <= s->prompt_len, "scheduler: request ", o.id, " prefilled past its prompt");
      if (s->prefilled == s->prompt_len) s->phase = Phase::Decode;
    }
    s->context_len += o.committed;
    if (o.tokens_left >= 0) s->tokens_left = o.tokens_left;
    const int plain_steps_before = s->steps_since_round;  // decode steps since the request's previous round
    if (o.committed > 0) s->steps_since_round = o.speculated ? 0 : s->steps_since_round + 1;
    if (o.speculated) {
      // A probe-priced round that fell short of its optimistic price confirms the request is below its class: its
      // next probe comes twice as late. One that met it, or a round the policy chose by the request's own price,
      // starts the interval over (an exploration round of step 6 leaves it).
      const SchedulerConfig& c = state.config;
      const auto work = work_of.find(o.id);
      if (work != work_of.end() && work->second->probe_priced) {
        const int longest = std::max(c.probe_interval, c.max_probe_interval);
        const bool fell_short = o.tokens_emitted < work->second->priced_tokens;
        s->probe_interval = fell_short ? std::min(longest, 2 * request_probe_interval(c, *s)) : 0;
      } else if (!plan.probe) {
        s->probe_interval = 0;
      }
      // Averages start from a prior counted as prior_rounds rounds: the first measured rounds replace it within a
      // few rounds, and one unlucky first round moves it by a third, not all the way.
      const int cls = s->temperature > 0 ? 1 : 0;
      const double prior_tokens = c.prior_tokens_per_round[cls];
      const double prior_nodes = std::max(1, std::min(s->node_cap, c.block_size / 2));
      auto ema = [](double weight, double old, double prior, double now) {
        return (1 - weight) * (old > 0 ? old : prior) + weight * now;
      };
      // A request's prior is what it was priced with before its first round: its class's averages, else the
      // config's (taken before this round joins the class).
      const double request_prior_tokens =
          state.class_tokens_per_round[cls] > 0 ? state.class_tokens_per_round[cls] : prior_tokens;
      const double request_prior_nodes =
          state.class_nodes_per_round[cls] > 0 ? state.class_nodes_per_round[cls] : prior_nodes;
      const double class_n = double(++state.class_rounds[cls]);
      const double wc = std::max(c.class_ema_weight, 1 / (c.prior_rounds + class_n));
      state.class_tokens_per_round[cls] = ema(wc, state.class_tokens_per_round[cls], prior_tokens, o.tokens_emitted);
      state.class_nodes_per_round[cls] = ema(wc, state.class_nodes_per_round[cls], prior_nodes, o.tree_nodes);
      // A measured average ages with the plain steps it went unrefreshed, as if each had been a round: a request
      // kept plain after a few poor rounds is re-priced mostly by its next (probe) round, not ~10% of it, so
      // speculation comes back within a probe interval where acceptance recovered.
      const double aged = s->tokens_per_round > 0 ? 1 - std::pow(1 - w, 1 + plain_steps_before) : w;
      const double wr = std::max(aged, 1 / (c.prior_rounds + double(++s->rounds)));
      s->tokens_per_round = ema(wr, s->tokens_per_round, request_prior_tokens, o.tokens_emitted);
      s->nodes_per_round = ema(wr, s->nodes_per_round, request_prior_nodes, o.tree_nodes);
    }
    if (o.finished) gone.push_back(o.id);
  }
  if (!gone.empty()) {
    std::sort(gone.begin(), gone.end());
    std::erase_if(state.seqs,
                  [&](const SeqView& s) { return std::binary_search(gone.begin(), gone.end(), s.id); });
  }
  if (state.config.forget_when_idle && state.seqs.empty()) {
    SchedulerState fresh;
    fresh.config = state.config;
    fresh.step = state.step;
    fresh.decode_steps = state.decode_steps;
    fresh.speculative_steps = state.speculative_steps;
    fresh.probe_steps = state.probe_steps;
    fresh.plain_probe_steps = state.plain_probe_steps;
    state = fresh;
  }
  ++state.step;
}

}  // namespace ts::sched
