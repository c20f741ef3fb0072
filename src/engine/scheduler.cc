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
void expectations(const SchedulerConfig& c, const SeqView& s, int* k, double* tokens) {
  const int budget = std::max(1, std::min(s.node_cap, s.mode == DecodeMode::Chain ? c.block_size - 1 : s.node_cap));
  *k = 1 + (s.nodes_per_round > 0 ? int(s.nodes_per_round + 0.5) : budget);
  *tokens = s.tokens_per_round > 0 ? s.tokens_per_round : c.prior_tokens_per_round[s.temperature > 0 ? 1 : 0];
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
  for (const SeqView& s : state.seqs)
    if (!s.cancelled && s.phase == Phase::Decode) plan.decode.push_back({s.id});
  plan.batch = int(plan.decode.size());
  size_t d = 0;
  for (const SeqView& s : state.seqs) {
    if (s.cancelled || s.phase != Phase::Decode) continue;
    DecodeWork& w = plan.decode[d++];
    w.pricing_batch = std::max(1, plan.batch);
    w.speculate = can_speculate(c, s);
    w.theta = s.mode == DecodeMode::Tree ? s.theta_floor : 0;
    if (!w.speculate || !s.adaptive || !c.cost) continue;
    w.adaptive = true;
    int k = 1;
    double tokens = 1;
    expectations(c, s, &k, &tokens);
    w.speculate = spec::speculation_pays(*c.cost, w.pricing_batch, k, tokens);
    if (s.mode == DecodeMode::Tree)
      w.theta = std::max(s.theta_floor, spec::adaptive_theta(*c.cost, w.pricing_batch, 1, 1.0));
  }
  return plan;
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
    if (o.speculated) {
      auto ema = [w](double old, double now) { return old > 0 ? (1 - w) * old + w * now : now; };
      s->tokens_per_round = ema(s->tokens_per_round, o.tokens_emitted);
      s->nodes_per_round = ema(s->nodes_per_round, o.tree_nodes);
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
