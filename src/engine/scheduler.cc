#include "engine/scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace ts::sched {

int64_t reserved_rows(const SchedulerState& state) {
  int64_t rows = 0;
  for (const SeqView& s : state.seqs)
    if (s.phase != Phase::Waiting) rows += s.reserve_rows;
  return rows;
}

namespace {

bool can_speculate(const SchedulerConfig& c, const SeqView& s) {
  // A round needs room for a whole block after the anchor (the anchor sits at position context_len).
  return s.mode != DecodeMode::None && c.block_size > 0 && s.context_len + c.block_size + 1 <= s.max_context;
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
}

}  // namespace

Plan schedule(const SchedulerState& state) {
  const SchedulerConfig& c = state.config;
  Plan plan;
  plan.step = state.step;

  int admitted = 0;
  int64_t reserved = 0;
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

  // Prefill chunks, in arrival order (admitted ones first come earlier in seqs than newly admitted ones).
  int budget = std::max(1, c.prefill_chunk);
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

  // Decode entries: every decoding request, priced at the live batch.
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
  struct Candidate {
    size_t index;
    int extra_rows;
    double extra_tokens;
  };
  std::vector<Candidate> candidates;
  double base_rows = plan.batch, base_tokens = plan.batch;
  int base_drafting = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const SeqView& s = *views[i];
    DecodeWork& w = plan.decode[i];
    w.pricing_batch = std::max(1, plan.batch);
    w.speculate = can_speculate(c, s);
    w.theta = s.mode == DecodeMode::Tree ? s.theta_floor : 0;
    if (!w.speculate) continue;
    int k = 1;
    double tokens = 1;
    expectations(state, s, &k, &tokens);
    if (!s.adaptive || !c.cost) {
      base_rows += k - 1;
      base_tokens += tokens - 1;
      ++base_drafting;
      continue;
    }
    w.adaptive = true;
    if (s.mode == DecodeMode::Tree)
      w.theta = std::max(s.theta_floor, spec::adaptive_theta(*c.cost, w.pricing_batch, 1, 1.0, s.context_len));
    w.speculate = false;  // decided below
    if (c.probe_interval > 0 && s.steps_since_round >= c.probe_interval) {
      // Probe: price it optimistically (its class's tokens per round, or the prior) rather than with its own
      // stale measurement; if even that does not pay at this load, no probe is wasted.
      const int cls = s.temperature > 0 ? 1 : 0;
      const double class_tokens =
          state.class_tokens_per_round[cls] > 0 ? state.class_tokens_per_round[cls] : c.prior_tokens_per_round[cls];
      tokens = std::max({tokens, class_tokens, c.prior_tokens_per_round[cls]});
    }
    candidates.push_back({i, k - 1, tokens - 1});
  }
  if (!candidates.empty()) {
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.extra_tokens * std::max(1, b.extra_rows) > b.extra_tokens * std::max(1, a.extra_rows);
    });
    double rows = base_rows, tokens = base_tokens, best_rate = -1;
    size_t best = 0;
    const double plain_extra = state.plain_observed >= kMinObservedSteps ? state.plain_residual_ms : 0.0;
    const double draft_extra = state.draft_observed >= kMinObservedSteps ? state.draft_residual_ms : 0.0;
    for (size_t j = 0; j <= candidates.size(); ++j) {
      const int drafting = base_drafting + int(j);
      const double step_ms =
          spec::step_cost_ms(*c.cost, plan.batch, rows, drafting, mean_context) + plain_extra + drafting * draft_extra;
      const double rate = tokens / std::max(step_ms, 1e-6);
      if (rate > best_rate) best_rate = rate, best = j;
      if (j < candidates.size()) {
        rows += candidates[j].extra_rows;
        tokens += candidates[j].extra_tokens;
      }
    }
    for (size_t j = 0; j < best; ++j) plan.decode[candidates[j].index].speculate = true;
  }
  return plan;
}

void observe_step(SchedulerState& state, int drafting, double actual_ms, double modelled_ms) {
  constexpr double kWeight = 0.1;
  if (!(actual_ms > 0) || !(modelled_ms > 0)) return;
  const double residual = actual_ms - modelled_ms;
  auto ema = [&](double& avg, int& n, double x) {
    avg = n == 0 ? x : (1 - kWeight) * avg + kWeight * x;
    ++n;
  };
  if (drafting == 0) {
    ema(state.plain_residual_ms, state.plain_observed, residual);
  } else {
    ema(state.draft_residual_ms, state.draft_observed, std::max(0.0, (residual - state.plain_residual_ms) / drafting));
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
  const double w = state.config.ema_weight;
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
    if (o.committed > 0) s->steps_since_round = o.speculated ? 0 : s->steps_since_round + 1;
    if (o.speculated) {
      // Averages start from the prior, so one unlucky first round cannot switch a request (or a class) off.
      const int cls = s->temperature > 0 ? 1 : 0;
      const double prior_tokens = state.config.prior_tokens_per_round[cls];
      const double prior_nodes = std::max(1, std::min(s->node_cap, state.config.block_size / 2));
      auto ema = [](double weight, double old, double prior, double now) {
        return (1 - weight) * (old > 0 ? old : prior) + weight * now;
      };
      const double wc = state.config.class_ema_weight;
      state.class_tokens_per_round[cls] = ema(wc, state.class_tokens_per_round[cls], prior_tokens, o.tokens_emitted);
      state.class_nodes_per_round[cls] = ema(wc, state.class_nodes_per_round[cls], prior_nodes, o.tree_nodes);
      s->tokens_per_round = ema(w, s->tokens_per_round, prior_tokens, o.tokens_emitted);
      s->nodes_per_round = ema(w, s->nodes_per_round, prior_nodes, o.tree_nodes);
    }
    if (o.finished) gone.push_back(o.id);
  }
  if (!gone.empty()) {
    std::sort(gone.begin(), gone.end());
    std::erase_if(state.seqs,
                  [&](const SeqView& s) { return std::binary_search(gone.begin(), gone.end(), s.id); });
  }
  ++state.step;
}

}  // namespace ts::sched
