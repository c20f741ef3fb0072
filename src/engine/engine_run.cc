// The model work of one engine step: one batched drafter forward, tree growth per request, ONE target forward over
// the ragged concatenation of every request's rows, then verification, KV compaction and drafter context extension
// per request. Any failure is confined to the request that raised it.
#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>

#include "core/timer.h"
#include "engine/engine_live.h"
#include "sampling/distribution.h"
#include "sampling/logit_adjust.h"
#include "sampling/penalties.h"
#include "spec_decode/round.h"

namespace ts {

struct Engine::Item {
  enum Kind { Prefill, Plain, Spec };
  Live* live = nullptr;
  Kind kind = Plain;
  sched::PrefillWork prefill;
  sched::DecodeWork decode;
  int anchor_pos = 0;               // Plain / Spec: the anchor's position (= committed rows)
  std::optional<spec_decode::Round> round;  // Spec, once its block is drafted (not copyable: built in place)
  std::vector<int32_t> tokens, positions;  // [rows] of this request in the target forward
  std::vector<uint8_t> visible;     // [rows, rows]; empty = causal
  std::vector<int32_t> logit_rows;  // local rows whose logits are needed
  // Where the forward left this request's outputs (its logits rows are edited in place: logit_bias, min_tokens,
  // penalties).
  ForwardResult* result = nullptr;
  int result_rows = 0;              // rows of that forward
  int row0 = 0;                     // first row of this request in it
  int logit0 = 0;                   // first logits row of this request in it
  double expand_ms = 0;
  int rows() const { return int(tokens.size()); }
  int tree_nodes() const { return round && round->tree().size() > 0 ? round->tree().size() - 1 : 0; }
};

namespace {

// The request's logit edits (sampling/logit_adjust.h) for the row that predicts its generated token number
// token_index (0-based).
LogitEdits edits_at(const RequestOptions& o, int64_t token_index) {
  return logit_edits_at(o.logit_bias, o.stop_ids, o.min_tokens, token_index);
}

// -inf on the ids a row may not emit: [emit_vocab, vocab) (EngineConfig::emit_vocab; 0 = none).
void mask_unemittable(int emit_vocab, int vocab, float* row) {
  if (emit_vocab > 0) std::fill(row + emit_vocab, row + vocab, -std::numeric_limits<float>::infinity());
}

// Whether any row predicting token number >= first_index gets an edit: false keeps the common path untouched.
bool edits_from(const RequestOptions& o, int64_t first_index) {
  return !o.logit_bias.empty() || (first_index < o.min_tokens && !o.stop_ids.empty());
}

}  // namespace

void Engine::flush_taps(Live& live) {
  if (live.backlog_positions.empty()) return;
  drafter_->extend_context(live.drafter_state, live.tap_backlog.data(), live.backlog_positions.data(),
                           int(live.backlog_positions.size()));
  live.tap_backlog.clear();
  live.backlog_positions.clear();
}

void Engine::forward_items(std::vector<Item*>& items, ForwardResult& result, bool want_taps) {
  ForwardBatch batch;
  std::vector<KVCache*> caches;
  bool any_mask = false;
  int n = 0;
  for (Item* it : items) {
    n += it->rows();
    any_mask |= !it->visible.empty();
  }
  if (any_mask) batch.visible.assign(size_t(n) * n, 0);  // [n, n]; only the per-sequence diagonal blocks are read
  int row = 0;
  for (size_t s = 0; s < items.size(); ++s) {
    Item& it = *items[s];
    it.row0 = row;
    it.logit0 = int(batch.logit_rows.size());
    const int r = it.rows();
    batch.tokens.insert(batch.tokens.end(), it.tokens.begin(), it.tokens.end());
    batch.positions.insert(batch.positions.end(), it.positions.begin(), it.positions.end());
    batch.seq.insert(batch.seq.end(), r, int32_t(s));
    for (int32_t l : it.logit_rows) batch.logit_rows.push_back(row + l);
    if (any_mask)
      for (int i = 0; i < r; ++i)
        for (int j = 0; j < r; ++j)
          batch.visible[size_t(row + i) * n + row + j] = it.visible.empty() ? uint8_t(j <= i) : it.visible[size_t(i) * r + j];
    caches.push_back(&it.live->cache);
    row += r;
  }
  if (want_taps) batch.hidden_layers = drafter_->config().target_layer_ids;
  for (Item* it : items) {
    it->result = &result;
    it->result_rows = n;
  }
  target_.forward(batch, caches, &result);
}

void Engine::finish_item(Item& item, sched::SeqOutcome& outcome) {
  Live& live = *item.live;
  ForwardResult& fr = *item.result;
  const int V = target_.config().vocab_size, H = target_.config().hidden_size;
  const RequestOptions& o = live.request.options;
  // This request's logits rows: [logit_rows, V]. Each is edited for the token it predicts: the prefill's and a
  // plain step's row predict token number generated.size(); a tree node's row at depth d, generated.size() + d.
  // First the ids the engine may not emit (EngineConfig::emit_vocab), then logit_bias and the min_tokens mask, then
  // the penalties (sampling/penalties.h): a tree node's row counts the draft tokens on its own path as generated, a
  // plain row only the generated tokens.
  float* logits = fr.logits.data() + size_t(item.logit0) * V;
  const int64_t generated = int64_t(live.generated.size());
  for (int r = 0; r < int(item.logit_rows.size()); ++r)
    mask_unemittable(config_.emit_vocab, V, logits + size_t(r) * V);
  if (edits_from(o, generated)) {
    for (int r = 0; r < int(item.logit_rows.size()); ++r) {
      const int depth = item.kind == Item::Spec ? item.round->tree().depth[size_t(r)] : 0;
      apply_logit_edits(edits_at(o, generated + depth), V, logits + size_t(r) * V);
    }
  }
  if (live.penalties.active() && !item.logit_rows.empty()) {
    if (item.kind == Item::Spec) {  // logit row r is tree node r
      const spec_decode::DraftTree& tree = item.round->tree();
      live.penalties.apply_to_tree(tree.token.data(), tree.parent.data(), tree.size(), V, logits);
    } else {
      live.penalties.apply(nullptr, 0, V, logits);
    }
  }
  // The drafter's new context rows: the target's taps at the kept local rows.  taps: [rows, n_taps * H]
  // Rows after a plain step wait in the backlog (flush_taps); a round's rows go straight in (the backlog was
  // flushed before its draft).
  auto extend_drafter = [&](const std::vector<int32_t>& local_rows, const std::vector<int32_t>& positions) {
    if (!live.speculative) return;
    const int n_taps = int(drafter_->config().target_layer_ids.size());
    std::vector<float>& taps = live.tap_backlog;
    size_t at = taps.size();
    taps.resize(at + local_rows.size() * size_t(n_taps) * H);
    for (size_t i = 0; i < local_rows.size(); ++i)
      for (int t = 0; t < n_taps; ++t, at += H)
        std::memcpy(&taps[at], &fr.hidden[(size_t(t) * item.result_rows + item.row0 + local_rows[i]) * H],
                    sizeof(float) * H);
    live.backlog_positions.insert(live.backlog_positions.end(), positions.begin(), positions.end());
    if (item.kind == Item::Spec || int(live.backlog_positions.size()) >= kMaxTapBacklog) flush_taps(live);
  };
  ++live.stats.target_forwards;
  if (item.kind == Item::Prefill) {
    live.cache.commit_all();
    std::vector<int32_t> rows(item.rows());
    for (int i = 0; i < item.rows(); ++i) rows[i] = i;
    extend_drafter(rows, item.positions);
    outcome.prefilled = item.rows();
    if (item.prefill.last) {
      if (o.max_new_tokens == 0) {
        live.finish = FinishReason::Length;
      } else {
        live.anchor = sample_token(logits, V, o.sampling, *live.chooser, runner_->probs);
        emit(live, live.anchor, logits);
      }
    }
  } else if (item.kind == Item::Plain) {
    live.cache.commit_all();
    extend_drafter({0}, {item.anchor_pos});
    outcome.committed = 1;
    live.anchor = sample_token(logits, V, o.sampling, *live.chooser, runner_->probs);
    emit(live, live.anchor, logits);
  } else {
    const spec_decode::RoundOutcome round = item.round->finish(logits, o.sampling, *live.chooser);
    live.cache.commit(round.kept_nodes);
    std::vector<int32_t> kept_positions;
    for (int32_t depth : round.kept_depths) kept_positions.push_back(item.anchor_pos + depth);
    extend_drafter(round.kept_nodes, kept_positions);
    record_round(live, round);
    for (const spec_decode::RoundOutcome::Emitted& e : round.emitted) emit(live, e.token, logits + size_t(e.row) * V);
    live.anchor = round.emitted.back().token;
    outcome.committed = int(round.kept_nodes.size());
    outcome.speculated = true;
    outcome.tokens_emitted = round.accepted + 1;
    outcome.tree_nodes = round.draft_nodes;
  }
  // The next anchor needs a position inside the context limit.
  if (!live.done() && live.cache.length() + 1 > live.max_context) live.finish = FinishReason::Length;
  // The prefix cache keeps the prompt's whole blocks as its chunks come in (for requests that share them while this
  // one runs) and the whole context's when the request ends (for the next turn of a chat).
  if (item.kind == Item::Prefill || live.done()) store_prefix(live);
}

void Engine::draft_blocks(const std::vector<Item*>& spec_items, StepReport& report) {
  if (spec_items.empty()) return;
  const int V = target_.config().vocab_size, B = drafter_->block_size();
  runner_->base_logits.resize(spec_items.size() * size_t(B) * V);  // [n, B, V]
  std::vector<DrafterState*> states;
  std::vector<int32_t> anchors, positions;
  for (Item* it : spec_items) {
    states.push_back(&it->live->drafter_state);
    anchors.push_back(it->live->anchor);
    positions.push_back(it->anchor_pos);
  }
  try {
    // The context must hold every committed token: a request's prompt, or the tokens of its plain steps, wait in
    // its backlog until its next round. Timed apart, as work deferred from earlier steps (StepReport::backlog_ms).
    const double t = now_ms();
    for (Item* it : spec_items) {
      report.backlog_rows += int(it->live->backlog_positions.size());
      flush_taps(*it->live);
    }
    if (report.backlog_rows > 0) report.backlog_ms = now_ms() - t;
    drafter_->draft_blocks(states, anchors.data(), positions.data(), runner_->base_logits.data());
  } catch (const std::exception&) {
    for (size_t i = 0; i < spec_items.size(); ++i) {  // isolate the request that fails
      try {
        flush_taps(*spec_items[i]->live);
        drafter_->draft_block(*states[i], anchors[i], positions[i], &runner_->base_logits[i * size_t(B) * V]);
      } catch (const std::exception& e) {
        fail(*spec_items[i]->live, e.what());
      }
    }
  }
}

void Engine::grow_tree(Item& it, const float* base_logits) {
  Live& live = *it.live;
  const RequestOptions& o = live.request.options;
  spec_decode::DraftedBlock block;
  block.vocab = target_.config().vocab_size;
  // No deeper than the request may still emit: a node at depth d is generated token number generated.size() + d,
  // and the round's bonus token follows the last accepted one (the scheduler speculates only with two or more left).
  block.block_size = std::max(1, std::min(drafter_->block_size(), live.tokens_left() - 1));
  block.base_logits = base_logits;  // [block_size, vocab]
  const Drafter* d = drafter_;
  block.add_markov_bias = [d](int32_t parent, float* out) { d->add_markov_bias(parent, out); };
  // The request's logit edits on q too, per depth like the target's rows: a child at depth d is generated token
  // number generated.size() + d - 1. The penalties on q use the generated tokens only, the same at every depth (q
  // sees only the parent, not the path): a cheap approximation of the target's per-path penalties, and exact all
  // the same, since any q is lossless as long as expansion and verification read the same one (the Round's).
  const int64_t generated = int64_t(live.generated.size());
  const bool edits = edits_from(o, generated);
  const PenaltyHistory* penalties = live.penalties.active() ? &live.penalties : nullptr;
  const int emit_vocab = config_.emit_vocab;
  if (edits || penalties || emit_vocab > 0) {
    block.edit = [&o, V = block.vocab, generated, edits, penalties, emit_vocab](int depth, float* out) {
      mask_unemittable(emit_vocab, V, out);
      if (edits) apply_logit_edits(edits_at(o, generated + depth - 1), V, out);
      if (penalties) penalties->apply(nullptr, 0, V, out);
    };
  }
  // The round's price: the request's fixed pricing, else the load-adaptive policy's curve at the batch the
  // scheduler priced this step at, else none. context: committed tokens (what each verified row attends over,
  // besides the tree). Per-node work outside the forward is learned from this engine's own rounds unless the
  // request set it; trees that must not depend on timings price from the curve alone.
  const RequestOptions::FixedPricing* fixed = o.fixed_pricing ? &*o.fixed_pricing : nullptr;
  const CostModel* cost = fixed ? &fixed->cost : it.decode.adaptive ? &*config_.cost_model : nullptr;
  spec_decode::RoundCost round_cost;
  if (cost) {
    const int batch = fixed ? fixed->batch : it.decode.pricing_batch;
    const int context = it.anchor_pos;
    double node_ms = fixed ? fixed->node_ms : 0;
    if (node_ms == 0 && !config_.deterministic_trees) node_ms = node_work_ms_.estimate();
    round_cost = [cost, batch, context, node_ms](int k) { return round_cost_ms(*cost, batch, k, context, node_ms); };
  }
  it.round.emplace(std::move(block));
  it.round->draft(live.anchor, live.tree, live.calibration.current(), *live.chooser, round_cost);
  const spec_decode::DraftTree& tree = it.round->tree();
  it.tokens = tree.token;
  for (int depth : tree.depth) it.positions.push_back(it.anchor_pos + depth);
  it.visible = tree.ancestor_mask();
  it.logit_rows.resize(tree.size());
  for (int r = 0; r < tree.size(); ++r) it.logit_rows[r] = r;
}

void Engine::record_round(Live& live, const spec_decode::RoundOutcome& round) {
  const RequestOptions& o = live.request.options;
  RequestStats& st = live.stats;
  ++st.rounds;
  st.tree_nodes += round.draft_nodes;
  st.tree_sizes.push_back(round.draft_nodes);
  st.accepted_draft_tokens += round.accepted;
  st.predicted_draft_tokens += round.predicted;
  st.accepted_at_depth[round.accepted] += 1;
  metrics_.spec_decode_predicted_tokens += round.predicted;
  ++metrics_.spec_decode_num_drafts;
  metrics_.spec_decode_num_draft_tokens += round.draft_nodes;
  metrics_.spec_decode_num_accepted_tokens += round.accepted;
  for (int p = 0; p < round.accepted && p < int(metrics_.spec_decode_num_accepted_tokens_per_pos.size()); ++p)
    ++metrics_.spec_decode_num_accepted_tokens_per_pos[p];
  if (o.collect_edges) live.edges.insert(live.edges.end(), round.edges.begin(), round.edges.end());
  // LogQ and Marginal trees never read the calibration: nothing to refit for them.
  if (o.online_calibration && reads_calibration(live.tree.mode)) {
    live.calibration.observe(round.edges);
    st.calibration_shifts.resize(spec_decode::kRankBuckets);
    for (int k = 0; k < spec_decode::kRankBuckets; ++k) st.calibration_shifts[k] = live.calibration.shift(k);
  }
}

void Engine::plan_items(const sched::Plan& plan, std::deque<Item>& items, std::vector<Item*>& spec_items,
                        StepReport& report, std::vector<sched::SeqOutcome>& outcomes) {
  auto skip_if_done = [&](Live& live) {
    if (!live.done()) return false;
    outcomes.push_back({live.id});
    outcomes.back().finished = true;
    return true;
  };
  for (RequestId id : plan.admit) {  // admitted but failed at allocation, with or without a chunk this step
    Live& live = *live_.at(id);
    if (live.done() && std::none_of(plan.prefill.begin(), plan.prefill.end(), [&](auto& p) { return p.id == id; }))
      skip_if_done(live);
  }
  for (const sched::PrefillWork& p : plan.prefill) {
    Live& live = *live_.at(p.id);
    if (skip_if_done(live)) continue;
    Item& it = items.emplace_back();
    it.live = &live;
    it.kind = Item::Prefill;
    live.prefill_started = true;
    it.prefill = p;
    it.tokens.assign(live.request.prompt.begin() + p.start, live.request.prompt.begin() + p.start + p.len);
    for (int i = 0; i < p.len; ++i) it.positions.push_back(p.start + i);
    if (p.last) it.logit_rows = {p.len - 1};
    report.prefill_tokens += p.len;
    ++report.prefill_requests;
  }
  for (const sched::DecodeWork& w : plan.decode) {
    Live& live = *live_.at(w.id);
    if (skip_if_done(live)) continue;
    Item& it = items.emplace_back();
    it.live = &live;
    it.decode = w;
    it.anchor_pos = live.cache.length();
    it.kind = w.speculate && live.speculative ? Item::Spec : Item::Plain;
    if (it.kind == Item::Spec) {
      spec_items.push_back(&it);  // rows come with its tree
    } else {
      it.tokens = {live.anchor};
      it.positions = {it.anchor_pos};
      it.logit_rows = {0};
    }
  }
}

void Engine::grow_trees(const std::vector<Item*>& spec_items, StepReport& report) {
  const int V = target_.config().vocab_size, B = drafter_ ? drafter_->block_size() : 0;
  for (size_t i = 0; i < spec_items.size(); ++i) {
    Item& it = *spec_items[i];
    if (it.live->done()) continue;
    const double t0 = now_ms();
    try {
      grow_tree(it, &runner_->base_logits[i * size_t(B) * V]);
    } catch (const std::exception& e) {
      fail(*it.live, e.what());
    }
    it.expand_ms = now_ms() - t0;
    report.expand_ms += it.expand_ms;
    // The engine's first rounds pay one-off costs (first touch of the expansion's buffers): not a node's price.
    if (it.tree_nodes() > 0 && ++node_work_rounds_ > sched::kResidualWarmupSteps)
      node_work_ms_.add(it.expand_ms / it.tree_nodes());
  }
}

void Engine::forward_all(std::deque<Item>& items, std::deque<ForwardResult>& results, StepReport& report) {
  std::vector<Item*> alive;
  bool want_taps = false;
  for (Item& it : items)
    if (!it.live->done()) {
      alive.push_back(&it);
      want_taps |= it.live->speculative;
      report.forward_rows += it.rows();
    }
  if (alive.empty()) return;
  try {
    forward_items(alive, results.emplace_back(), want_taps);
  } catch (const std::exception& e) {
    for (Item* it : alive) it->live->cache.drop_pending();
    if (alive.size() == 1) {
      fail(*alive[0]->live, e.what());
      return;
    }
    for (Item* it : alive) {  // each request alone: the one that fails fails alone
      std::vector<Item*> one = {it};
      try {
        forward_items(one, results.emplace_back(), it->live->speculative);
      } catch (const std::exception& e2) {
        it->live->cache.drop_pending();
        fail(*it->live, e2.what());
      }
    }
  }
}

void Engine::finish_all(std::deque<Item>& items, StepReport& report, std::vector<sched::SeqOutcome>& outcomes) {
  for (Item& it : items) {
    Live& live = *it.live;
    sched::SeqOutcome& outcome = outcomes.emplace_back();
    outcome.id = live.id;
    const double t0 = now_ms();
    if (!live.done()) {
      try {
        finish_item(it, outcome);
      } catch (const std::exception& e) {
        fail(live, e.what());
      }
    }
    const double own_ms = now_ms() - t0;
    RequestStats& st = live.stats;
    if (it.kind == Item::Prefill) {
      st.prefill_ms += report.forward_ms + own_ms;
    } else if (it.kind == Item::Spec) {
      st.draft_ms += report.draft_ms + it.expand_ms;
      st.expand_ms += it.expand_ms;
      st.verify_ms += report.forward_ms + own_ms;
      report.decisions.push_back({live.id, true, it.decode.theta, it.tree_nodes(),
                                  outcome.speculated ? outcome.tokens_emitted - 1 : 0, it.decode.priced_tokens,
                                  it.decode.priced_rows, it.decode.probe_priced});
    } else {
      report.decisions.push_back({live.id, false, it.decode.theta, 0, 0, it.decode.priced_tokens,
                                  it.decode.priced_rows, it.decode.probe_priced});
    }
    if (live.done()) outcome.finished = true;
  }
}

// The step's phases; each confines a failure to the request that raised it.
void Engine::run(const sched::Plan& plan, StepReport& report, std::vector<sched::SeqOutcome>& outcomes) {
  std::deque<Item> items;  // stable addresses: phases keep pointers to them
  std::vector<Item*> spec_items;
  plan_items(plan, items, spec_items, report, outcomes);
  report.batch = plan.batch;
  // 1. One batched drafter forward for every speculating request; 2. its round's tree, per request.
  double t = now_ms();
  draft_blocks(spec_items, report);
  report.draft_ms = now_ms() - t;  // backlog_ms included
  grow_trees(spec_items, report);
  // 3. ONE target forward over every request's rows (each request alone after a failure).
  t = now_ms();
  std::deque<ForwardResult> results;  // the items' logits and taps, read by phase 4
  forward_all(items, results, report);
  report.forward_ms = now_ms() - t;
  // 4. Verification, KV compaction, drafter context, events per request.
  t = now_ms();
  finish_all(items, report, outcomes);
  report.verify_ms = now_ms() - t;
}

}  // namespace ts
