// The step engine's bookkeeping: validation, admission, cancellation, events and metrics. The model work of a step
// is in engine_run.cc.
#include "engine/engine.h"

#include <algorithm>
#include <functional>
#include <new>
#include <string>
#include <unordered_set>

#include "core/timer.h"
#include "engine/engine_live.h"
#include "sampling/logprobs.h"

namespace ts {

namespace {

constexpr int kMaxTreeNodes = 1024;  // one round's tree rows are reserved in KV memory: keep them bounded

// What expansion reads for this request: its shape and mode, drafting at its temperature with its processors
// (sampled drafts closer to the processed p are accepted more: draft_source.h). A chain has one child per node.
spec_decode::TreeParams tree_params_for(const RequestOptions& o) {
  spec_decode::TreeParams t;
  static_cast<spec_decode::TreeShape&>(t) = o.tree;
  t.mode = o.mode;
  if (o.mode == DecodeMode::Chain) t.branch_cap = 1;
  t.temperature = o.sampling.temperature;
  t.filter = spec_decode::DraftFilter{o.sampling.top_k, o.sampling.top_p, o.sampling.min_p};
  return t;
}

// Rows a request's caches get beyond its prompt at admission (decode rounds until the first growth).
constexpr int kFirstDecodeRows = 256;

int tree_rows(const RequestOptions& o) {
  if (o.mode == DecodeMode::None) return 1;
  return std::max(o.tree.node_cap, o.tree.draft_len) + 2;
}

// Context tokens the request can ever hold: prompt + max_new_tokens, capped by its context limit.
int context_need(const Request& r, int max_context) {
  const int64_t need = int64_t(r.prompt.size()) + std::max(0, r.options.max_new_tokens);
  return int(std::min<int64_t>(need, max_context));
}

}  // namespace

Engine::Engine(TargetModel& target, Drafter* drafter, EngineConfig config)
    : target_(target), drafter_(drafter), config_(std::move(config)), runner_(std::make_unique<Runner>()) {
  const ModelConfig& t = target_.config();
  if (drafter_) check_pair(drafter_->config(), t, "drafter");
  TS_CHECK(config_.max_batch >= 1, "max_batch must be >= 1, got ", config_.max_batch);
  TS_CHECK(config_.max_queue >= 0, "max_queue must be >= 0, got ", config_.max_queue);
  TS_CHECK(config_.max_context >= 2, "max_context must be >= 2, got ", config_.max_context);
  TS_CHECK(config_.prefill_chunk >= 1, "prefill_chunk must be >= 1, got ", config_.prefill_chunk);
  TS_CHECK(config_.kv_budget_bytes >= 0, "kv_budget_bytes must be >= 0");
  TS_CHECK(config_.emit_vocab >= 0 && config_.emit_vocab <= t.vocab_size, "emit_vocab must be in [0, ",
           t.vocab_size, "] (the model's vocabulary), got ", config_.emit_vocab);
  if (config_.emit_vocab == t.vocab_size) config_.emit_vocab = 0;  // nothing to mask
  if (config_.cost_model) config_.cost_model->validate();
  max_context_ = std::min(config_.max_context, t.max_position_embeddings);

  // One token row: K and V of every target layer, plus the drafter's context row, in their caches' dtypes.
  kv_bytes_per_row_ = target_.new_cache(1).bytes_per_row();
  if (drafter_) kv_bytes_per_row_ += drafter_->new_state(1).context.bytes_per_row();
  int64_t budget_rows = config_.kv_budget_bytes / kv_bytes_per_row_;
  if (config_.kv_budget_bytes == 0) budget_rows = int64_t(config_.max_batch) * (max_context_ + 66 + 16);
  config_.kv_budget_bytes = budget_rows * kv_bytes_per_row_;

  sched::SchedulerConfig& sc = sched_.config;
  sc.max_batch = config_.max_batch;
  sc.prefill_chunk = config_.prefill_chunk;
  sc.kv_budget_rows = budget_rows;
  sc.block_size = drafter_ ? drafter_->block_size() : 0;
  sc.cost = config_.cost_model ? &*config_.cost_model : nullptr;
  sc.forget_when_idle = config_.deterministic_trees;
  TS_CHECK(config_.plain_probe_interval >= 0, "plain_probe_interval must be >= 0, got ", config_.plain_probe_interval);
  sc.plain_probe_interval = config_.plain_probe_interval;
  for (int c = 0; c < 2; ++c) {
    TS_CHECK(config_.prior_tokens_per_round[c] >= 1, "prior_tokens_per_round must be >= 1 (a round emits at least "
             "its bonus token), got ", config_.prior_tokens_per_round[c]);
    sc.prior_tokens_per_round[c] = config_.prior_tokens_per_round[c];
  }
  metrics_.kv_budget_bytes = config_.kv_budget_bytes;
  if (config_.prefix_cache) {
    const int b = config_.prefix_block_tokens;
    // Requests read blocks in place, as spans of the attention kernel's key tiles of 16 rows.
    TS_CHECK(b >= 16 && b <= 4096 && b % 16 == 0, "prefix_block_tokens must be a multiple of 16 in [16, 4096], got ",
             b);
    // Whatever changes a block's rows besides its tokens: the models' weights and shapes and the caches' dtypes.
    const KVCache target_rows = target_.new_cache(1);
    std::string identity = cat(t.architecture, ' ', t.num_layers, ' ', t.hidden_size, ' ', t.vocab_size, ' ',
                               target_.weight_format(), ' ', dtype_name(target_rows.dtype()));
    if (drafter_)
      identity += cat(" drafter ", drafter_->weight_format(), ' ', dtype_name(drafter_->new_state(1).context.dtype()),
                      ' ', drafter_->config().num_layers, ' ', drafter_->block_size());
    const int64_t slots = budget_rows / b;
    prefix_cache_ = std::make_unique<PrefixCache>(b, std::hash<std::string>{}(identity), slots);
    // Chunks of about 4096 rows: runs of a cached prefix up to that long are one span, and a chunk is allocated only
    // when the cache first fills one of its slots.
    const int chunk_slots = std::max(1, 4096 / b);
    TargetModel& target = target_;
    target_pool_ = BlockPool([&target](int rows) { return target.new_cache(rows); }, b, slots, chunk_slots);
    if (drafter_) {
      Drafter* drafter = drafter_;
      drafter_pool_ =
          BlockPool([drafter](int rows) { return drafter->new_state(rows).context; }, b, slots, chunk_slots);
    }
    metrics_.prefix_cache_block_tokens = b;
    metrics_.prefix_cache_capacity_blocks = slots;
  }
  metrics_.spec_decode_num_accepted_tokens_per_pos.assign(std::max(0, sc.block_size), 0);
}

Engine::~Engine() = default;

void Engine::validate(const Request& r) const {
  const RequestOptions& o = r.options;
  auto bad = [](const std::string& m) { throw RequestRejected(RejectReason::BadParams, m); };
  try {
    validate_sampling_params(o.sampling);
    if (o.mode != DecodeMode::None) spec_decode::validate_tree_params(tree_params_for(o));
    if (o.fixed_pricing) {
      o.fixed_pricing->cost.validate();
      TS_CHECK(o.fixed_pricing->batch >= 1, "fixed_pricing: batch must be >= 1, got ", o.fixed_pricing->batch);
      TS_CHECK(o.fixed_pricing->node_ms >= 0, "fixed_pricing: node_ms must be >= 0, got ", o.fixed_pricing->node_ms);
    }
  } catch (const RequestRejected&) {
    throw;
  } catch (const Error& e) {
    bad(e.what());
  }
  if (o.mode != DecodeMode::None && (o.tree.node_cap > kMaxTreeNodes || o.tree.draft_len > kMaxTreeNodes))
    bad(cat("node_cap and draft_len must be <= ", kMaxTreeNodes, ", got ", o.tree.node_cap, " and ", o.tree.draft_len));
  if (r.prompt.empty()) bad("empty prompt");
  if (o.max_new_tokens < 0) bad(cat("max_new_tokens must be >= 0, got ", o.max_new_tokens));
  if (o.max_context < 2) bad(cat("max_context must be >= 2, got ", o.max_context));
  if (o.mode != DecodeMode::None && !drafter_) bad("speculative decoding needs a drafter");
  const int V = target_.config().vocab_size;
  for (int32_t id : r.prompt)
    if (id < 0 || id >= V) bad(cat("prompt token id ", id, " outside the vocabulary [0, ", V, ")"));
  for (const auto& [id, bias] : o.logit_bias) {
    if (id < 0 || id >= V) bad(cat("logit_bias: token id ", id, " outside the vocabulary [0, ", V, ")"));
    if (!(bias >= -100 && bias <= 100))
      bad(cat("logit_bias: bias of token ", id, " must be in [-100, 100], got ", bias));
  }
  if (o.min_tokens < 0 || o.min_tokens > o.max_new_tokens)
    bad(cat("min_tokens must be in [0, max_new_tokens = ", o.max_new_tokens, "], got ", o.min_tokens));
  // Written as !(in range) so that NaN is refused too.
  if (!(o.presence_penalty >= -2 && o.presence_penalty <= 2))
    bad(cat("presence_penalty must be in [-2, 2], got ", o.presence_penalty));
  if (!(o.frequency_penalty >= -2 && o.frequency_penalty <= 2))
    bad(cat("frequency_penalty must be in [-2, 2], got ", o.frequency_penalty));
  if (!(o.repetition_penalty > 0 && o.repetition_penalty <= 10))
    bad(cat("repetition_penalty must be in (0, 10], got ", o.repetition_penalty));
  if (o.logprobs < -1 || o.logprobs > kMaxTopLogprobs)
    bad(cat("logprobs must be -1 (off) or in [0, ", kMaxTopLogprobs, "], got ", o.logprobs));
  const int max_ctx = std::min(o.max_context, max_context_);
  if (int(r.prompt.size()) >= max_ctx)
    throw RequestRejected(RejectReason::OverContext, cat("prompt of ", r.prompt.size(),
                                                         " tokens does not fit the context limit of ", max_ctx,
                                                         " tokens"));
  const int64_t rows = context_need(r, max_ctx) + tree_rows(o) + (drafter_ ? drafter_->block_size() : 0);
  if (rows > sched_.config.kv_budget_rows)
    throw RequestRejected(RejectReason::OverContext,
                          cat("request needs ", rows * kv_bytes_per_row_, " bytes of KV memory; the budget is ",
                              config_.kv_budget_bytes, " bytes"));
}

RequestId Engine::add(Request request, EventCallback on_event, RequestId id) {
  validate(request);
  if (int(sched_.seqs.size()) >= config_.max_batch + config_.max_queue)
    throw RequestRejected(RejectReason::QueueFull,
                          cat("queue full: ", sched_.seqs.size(), " requests in progress (max_batch ",
                              config_.max_batch, " + max_queue ", config_.max_queue, ")"));
  if (id == 0) id = next_id_;
  TS_CHECK(!live_.count(id), "request id ", id, " is already in use");
  next_id_ = std::max(next_id_, id + 1);

  auto live = std::make_unique<Live>();
  live->id = id;
  live->on_event = std::move(on_event);
  const RequestOptions& o = request.options;
  live->max_context = std::min(o.max_context, max_context_);
  live->speculative = o.mode != DecodeMode::None;
  live->tree = tree_params_for(o);  // mode None: never expanded
  live->calibration = spec_decode::OnlineCalibration(
      o.calibration ? *o.calibration : config_.calibration.lookup(o.sampling.temperature, live->tree.filter));
  live->context_rows = context_need(request, live->max_context);
  live->reserve_rows = live->context_rows + tree_rows(o) +
                       (live->speculative ? drafter_->block_size() : 0);
  live->stats.prompt_tokens = int(request.prompt.size());
  live->penalties = PenaltyHistory(PenaltyParams{o.presence_penalty, o.frequency_penalty, o.repetition_penalty},
                                   request.prompt);
  if (live->speculative) live->stats.accepted_at_depth.assign(drafter_->block_size() + 1, 0);
  live->t_add_ms = now_ms();

  if (prefix_cache_) live->prompt_chain = prefix_cache_->chain(request.prompt.data(), int(request.prompt.size()));
  sched::SeqView v;
  v.id = id;
  v.prompt_len = int(request.prompt.size());
  v.max_context = live->max_context;
  v.reserve_rows = live->reserve_rows;
  v.mode = o.mode;
  v.adaptive = o.adaptive && !o.fixed_pricing && config_.cost_model.has_value();
  v.temperature = o.sampling.temperature;
  v.theta_floor = o.tree.theta;
  v.node_cap = o.mode == DecodeMode::Chain ? o.tree.draft_len : o.tree.node_cap;
  v.tokens_left = o.max_new_tokens;
  sched_.seqs.push_back(v);
  live->request = std::move(request);
  live_[id] = std::move(live);
  return id;
}

void Engine::cancel(RequestId id) {
  for (sched::SeqView& s : sched_.seqs)
    if (s.id == id) s.cancelled = true;
}

void Engine::cancel_all() {
  for (sched::SeqView& s : sched_.seqs) s.cancelled = true;
}

bool Engine::idle() const { return sched_.seqs.empty(); }

int Engine::num_waiting() const {
  int n = 0;
  for (const sched::SeqView& s : sched_.seqs) n += s.phase == sched::Phase::Waiting;
  return n;
}

int Engine::num_running() const { return int(sched_.seqs.size()) - num_waiting(); }

std::vector<const PrefixCache::Block*> Engine::CacheHit::all() const {
  std::vector<const PrefixCache::Block*> out = blocks;
  if (tail.block) out.push_back(tail.block);
  return out;
}

Engine::CacheHit Engine::cache_hit(const Live& live) const {
  if (!prefix_cache_) return {};
  // At least the prompt's last token is computed: its logits give the first generated token.
  const int n = int(live.request.prompt.size()) - 1;
  CacheHit hit;
  hit.blocks = prefix_cache_->match(live.request.prompt.data(), n, live.prompt_chain, live.speculative);
  hit.tail = prefix_cache_->match_tail(live.request.prompt.data(), n, hit.blocks, live.speculative);
  return hit;
}

void Engine::refresh_cached_prefixes() {
  if (!prefix_cache_) return;
  const double t0 = now_ms();
  const int b = prefix_cache_->block_tokens();
  int looked = 0;
  std::unordered_set<const PrefixCache::Block*> claimed;  // unpinned blocks an earlier waiting request would pin
  for (sched::SeqView& s : sched_.seqs) {
    if (s.cancelled) continue;
    Live& live = *live_.at(s.id);
    if (s.phase == sched::Phase::Waiting) {
      if (looked++ == config_.max_batch) break;  // admission stops earlier
      const CacheHit hit = cache_hit(live);
      s.prefilled = s.context_len = int(hit.blocks.size()) * b + hit.tail.rows;
      // Blocks pinned already are counted once in shared_rows; the others count as the rows of the first waiting
      // request that would pin them (admission goes in this order and stops at the first that does not fit). A
      // tail's rows are copied: its own.
      int free_blocks = 0;
      for (const PrefixCache::Block* block : hit.blocks)
        free_blocks += block->refs > 0 || !claimed.insert(block).second;
      s.reserve_rows = live.reserve_rows - free_blocks * b;
    } else if (s.phase == sched::Phase::Prefill && !live.prefill_started && !live.done()) {
      // Admitted beside a request that shares its prefix and is prefilling it now (a burst of requests with one
      // system prompt): the blocks that request stored since take this one's prefill further. Its cache holds
      // only shared blocks so far (else its own rows are under way); the new ones follow them.
      if (live.cache.length() != live.cache.shared_rows()) continue;
      const CacheHit hit = cache_hit(live);
      const int held = live.cache.shared_rows() / b;
      if (int(hit.blocks.size()) <= held && hit.tail.rows == 0) continue;
      const std::vector<const PrefixCache::Block*> more(hit.blocks.begin() + std::min<int>(held, hit.blocks.size()),
                                                        hit.blocks.end());
      std::vector<const PrefixCache::Block*> tail_block;  // pinned while its rows are copied
      if (hit.tail.block) tail_block.push_back(hit.tail.block);
      prefix_cache_->acquire(tail_block);
      try {
        share_blocks(live, more);
        copy_tail(live, hit.tail);
      } catch (const std::exception& e) {
        fail(live, e.what());
      }
      prefix_cache_->release(tail_block);
      s.prefilled = s.context_len = live.cache.length();
      s.reserve_rows = live.reserve_rows - live.cache.shared_rows();
    }
  }
  sched_.shared_rows = prefix_cache_->pinned_rows();
  metrics_.prefix_cache_ms_total += now_ms() - t0;
}

void Engine::share_blocks(Live& live, const std::vector<const PrefixCache::Block*>& blocks) {
  const int b = prefix_cache_->block_tokens();
  // Pinned before the caches point into them; released when the request leaves (forget), whatever happens here.
  prefix_cache_->acquire(blocks);
  live.shared_blocks.insert(live.shared_blocks.end(), blocks.begin(), blocks.end());
  for (const PrefixCache::Block* block : blocks) {
    target_pool_.share(block->slot, live.cache);
    if (live.speculative) drafter_pool_.share(block->slot, live.drafter_state.context);
  }
  live.stats.cached_prompt_tokens = live.cache.length();
  metrics_.prefix_cache_hits += int64_t(blocks.size()) * b;
}

void Engine::copy_tail(Live& live, const PrefixCache::Tail& tail) {
  if (tail.rows == 0) return;
  const double t0 = now_ms();
  target_pool_.copy(tail.block->slot, tail.rows, live.cache);
  if (live.speculative) drafter_pool_.copy(tail.block->slot, tail.rows, live.drafter_state.context);
  metrics_.prefix_cache_copy_ms_total += now_ms() - t0;
  live.stats.cached_prompt_tokens = live.cache.length();
  metrics_.prefix_cache_hits += tail.rows;
}

void Engine::release_unused_chunks() {
  // Evictions free slots; a chunk none of whose slots holds an entry goes back to the allocator (and its pages to the
  // system), so the pools' memory follows what the cache holds, not the most it ever held.
  auto all_free = [this](int64_t first, int64_t n) { return prefix_cache_->slots_free(first, n); };
  target_pool_.release_unused(all_free);
  drafter_pool_.release_unused(all_free);
}

void Engine::forget(std::unordered_map<RequestId, std::unique_ptr<Live>>::iterator it) {
  if (prefix_cache_) prefix_cache_->release(it->second->shared_blocks);
  live_.erase(it);
}

int64_t Engine::prefix_cache_limit_rows(const Live* leaving) const {
  int64_t reserved = 0;
  for (const auto& [id, live] : live_)
    if (live->admitted && live.get() != leaving) reserved += live->reserve_rows - live->cache.shared_rows();
  return std::max<int64_t>(0, sched_.config.kv_budget_rows - reserved);
}

void Engine::admit_all(const std::vector<RequestId>& ids) {
  // Pin every hit, make room for the new reservations (pinned blocks stay), share the hits (each request pins its
  // own), unpin the admission's pins, make room again.
  const double t0 = now_ms();
  double own_caches_ms = 0;  // allocating the requests' own caches: not the prefix cache's work
  std::vector<CacheHit> hits(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    Live& live = *live_.at(ids[i]);
    live.admitted = true;
    hits[i] = cache_hit(live);
    if (prefix_cache_) prefix_cache_->acquire(hits[i].all());
  }
  if (prefix_cache_) prefix_cache_->evict_to(prefix_cache_limit_rows(nullptr));
  for (size_t i = 0; i < ids.size(); ++i) {
    Live& live = *live_.at(ids[i]);
    try {
      own_caches_ms += admit(live, hits[i]);
    } catch (const std::bad_alloc&) {
      fail(live, "out of memory allocating the KV cache");
    } catch (const std::exception& e) {
      fail(live, e.what());
    }
    if (prefix_cache_) prefix_cache_->release(hits[i].all());
  }
  if (prefix_cache_) {
    prefix_cache_->evict_to(prefix_cache_limit_rows(nullptr));
    release_unused_chunks();
    metrics_.prefix_cache_ms_total += now_ms() - t0 - own_caches_ms;
  }
}

double Engine::admit(Live& live, const CacheHit& hit) {
  const double t0 = now_ms();
  live.cache = target_.new_cache(live.reserve_rows);
  if (live.speculative) live.drafter_state = drafter_->new_state(live.context_rows);  // + block_size rows
  double alloc_ms = now_ms() - t0;
  const int prompt = int(live.request.prompt.size());
  metrics_.prompt_tokens += prompt;
  if (prefix_cache_) {
    metrics_.prefix_cache_queries += prompt;
    share_blocks(live, hit.blocks);
    copy_tail(live, hit.tail);
    sched::SeqView* view = nullptr;
    for (sched::SeqView& s : sched_.seqs)
      if (s.id == live.id) view = &s;
    TS_CHECK(view && view->prefilled == live.cache.length(), "prefix cache: request ", live.id, " planned from ",
             view ? view->prefilled : -1, " cached tokens, found ", live.cache.length());
    view->reserve_rows = live.reserve_rows - live.cache.shared_rows();  // its own rows; the shared ones are pinned
  }
  // Room for the rest of the prompt and the first decode rounds now: the caches otherwise grow by doubling, and each
  // growth allocates (fresh pages: as slow as the copy on a VM) and copies every row so far.
  const double t1 = now_ms();
  const int first_rows = prompt + kFirstDecodeRows;
  live.cache.reserve(first_rows);  // clamped to reserve_rows; the shared rows take no room
  if (live.speculative) live.drafter_state.context.reserve(first_rows);
  alloc_ms += now_ms() - t1;
  live.chooser = std::make_unique<RandomChooser>(live.request.options.sampling.seed);
  live.stats.queue_ms = now_ms() - live.t_add_ms;
  return alloc_ms;
}

void Engine::store_prefix(Live& live) {
  if (!prefix_cache_ || live.finish == FinishReason::Error || live.cache.pending() > 0) return;
  // The drafter's context must hold the rows it stores: taps waiting in the backlog enter it now (the work the
  // next round would do, or the next turn's request would otherwise redo).
  if (live.speculative) {
    try {
      flush_taps(live);  // drafter work, not the cache's bookkeeping
    } catch (const std::exception&) {
      return;  // a drafter failure here costs the cache its blocks, nothing else
    }
  }
  const double t0 = now_ms();
  // Context tokens: the prompt, then the generated tokens fed back. A round that ended the request may have kept
  // rows of accepted tokens past the last one emitted (max_new_tokens cut the emission short): their tokens are not
  // the request's, so their rows are not stored.
  std::vector<int32_t> context(live.request.prompt);
  context.insert(context.end(), live.generated.begin(), live.generated.end());
  const int n = std::min(live.cache.length(), int(context.size()));
  context.resize(size_t(n));
  const int b = prefix_cache_->block_tokens();
  const int drafter_rows = live.speculative ? live.drafter_state.context.length() : 0;
  double copy_ms = 0;
  auto target = [&](int i, int slot, int rows) {
    const double t = now_ms();
    target_pool_.write(slot, rows, live.cache, i * b);
    copy_ms += now_ms() - t;
  };
  auto drafter = [&](int i, int slot, int rows) {
    if (i * b + rows > drafter_rows) return false;
    const double t = now_ms();
    drafter_pool_.write(slot, rows, live.drafter_state.context, i * b);
    copy_ms += now_ms() - t;
    return true;
  };
  // The prompt's names were computed at add(); a context longer than the prompt is named afresh.
  const std::vector<uint64_t> chain =
      n <= int(live.request.prompt.size())
          ? std::vector<uint64_t>(live.prompt_chain.begin(), live.prompt_chain.begin() + n / b)
          : prefix_cache_->chain(context.data(), n);
  // A request that ends leaves its last partial block as a tail too (the next turn of a chat reuses every row).
  prefix_cache_->store(context.data(), n, chain, prefix_cache_limit_rows(live.done() ? &live : nullptr), target,
                       drafter, /*tail=*/live.done());
  release_unused_chunks();  // the store may have evicted
  metrics_.prefix_cache_ms_total += now_ms() - t0;
  metrics_.prefix_cache_copy_ms_total += copy_ms;
}

void Engine::emit(Live& live, int32_t token, const float* logits) {
  if (live.done()) return;
  const RequestOptions& o = live.request.options;
  if (o.logprobs >= 0)
    live.step_logprobs.push_back(token_logprobs(logits, target_.config().vocab_size, token, o.logprobs));
  live.generated.push_back(token);
  live.penalties.add_generated(token);  // nothing when the penalties are neutral
  live.step_tokens.push_back(token);
  if (std::find(o.stop_ids.begin(), o.stop_ids.end(), token) != o.stop_ids.end()) {
    live.finish = FinishReason::Stop;
  } else if (int(live.generated.size()) >= o.max_new_tokens) {
    live.finish = FinishReason::Length;
  }
}

void Engine::fail(Live& live, const std::string& message) {
  if (live.done()) return;
  live.finish = FinishReason::Error;
  live.error = message;
  live.cache.drop_pending();
}

void Engine::deliver(Live& live) {
  const double t = now_ms();
  if (!live.step_tokens.empty()) {
    const int n = int(live.step_tokens.size());
    if (live.generated.size() == live.step_tokens.size()) {  // the request's first tokens
      live.stats.ttft_ms = t - live.t_add_ms;
      metrics_.time_to_first_token.observe(live.stats.ttft_ms / 1000.0);
      for (int i = 1; i < n; ++i) metrics_.inter_token_latency.observe(0);
    } else {
      for (int i = 0; i < n; ++i) metrics_.inter_token_latency.observe((t - live.t_last_tokens_ms) / 1000.0 / n);
    }
    live.t_last_tokens_ms = t;
    metrics_.generation_tokens += n;
  }
  live.stats.generated_tokens = int(live.generated.size());
  if (live.done()) live.stats.total_ms = t - live.t_add_ms;
  if (!live.on_event || (live.step_tokens.empty() && !live.done())) {
    live.step_tokens.clear();
    live.step_logprobs.clear();
    return;
  }
  RequestEvent e;
  e.id = live.id;
  e.tokens.swap(live.step_tokens);
  e.logprobs.swap(live.step_logprobs);
  e.finish = live.finish;
  e.error = live.error;
  e.stats = &live.stats;
  if (live.done() && live.request.options.collect_edges) e.edges = &live.edges;
  try {
    live.on_event(e);
  } catch (const std::exception& ex) {
    if (live.done()) return;  // the final event's exceptions are ignored
    fail(live, cat("event callback failed: ", ex.what()));
    RequestEvent last;
    last.id = live.id;
    last.finish = live.finish;
    last.error = live.error;
    last.stats = &live.stats;
    try {
      live.on_event(last);
    } catch (...) {
    }
  }
}

StepReport Engine::step() {
  const double t0 = now_ms();
  StepReport report;
  report.step = sched_.step;
  refresh_cached_prefixes();
  const sched::Plan plan = sched::schedule(sched_);
  double sched_ms = now_ms() - t0;

  std::vector<sched::SeqOutcome> outcomes;
  for (RequestId id : plan.evict) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    it->second->finish = FinishReason::Cancelled;
    if (it->second->admitted) store_prefix(*it->second);  // what it computed stays reusable (a client that left)
    deliver(*it->second);
  }
  admit_all(plan.admit);
  run(plan, report, outcomes);

  const double t_update = now_ms();
  for (sched::SeqOutcome& o : outcomes) {
    Live& live = *live_.at(o.id);
    deliver(live);  // a throwing callback may fail the request here
    if (live.done()) o.finished = true;
    o.tokens_left = live.tokens_left();
  }
  const int plain_steps_before = sched_.steps_since_draft;
  sched::update(sched_, plan, outcomes);
  for (RequestId id : plan.evict) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    ++metrics_.requests_finished[int(FinishReason::Cancelled)];
    forget(it);
  }
  for (const sched::SeqOutcome& o : outcomes) {
    metrics_.prompt_tokens_computed += o.prefilled;
    if (!o.finished) continue;
    auto it = live_.find(o.id);
    if (it == live_.end()) continue;
    ++metrics_.requests_finished[int(it->second->finish)];
    forget(it);
  }
  if (prefix_cache_) sched_.shared_rows = prefix_cache_->pinned_rows();  // requests that left unpinned theirs
  sched_ms += now_ms() - t_update;
  report.schedule_ms = sched_ms;
  report.step_ms = now_ms() - t0;
  report.probe = plan.probe;
  report.plain_probe = plan.plain_probe;
  const bool priced =
      sched_.config.cost && report.prefill_requests == 0 && report.batch > 0 && report.forward_rows >= report.batch;
  sched::StepObservation seen;
  if (priced) {
    seen.batch = report.batch;
    for (const RoundDecision& d : report.decisions) seen.drafting += d.speculate;
    seen.probe = plan.probe;
    seen.plain_steps_before = plain_steps_before;
    try {
      seen.modelled_ms = step_cost_ms(*sched_.config.cost, report.batch, report.forward_rows, seen.drafting,
                                            plan.mean_context);
      seen.modelled_plain_ms = step_cost_ms(*sched_.config.cost, report.batch, report.batch, 0, plan.mean_context);
      report.modelled_ms = seen.modelled_ms + sched::plain_residual_ms(sched_, report.batch) +
                           seen.drafting * sched::draft_residual_ms(sched_, report.batch);
    } catch (const std::exception&) {
      // a cost model that cannot price this step teaches nothing
    }
  }
  ++metrics_.steps;
  metrics_.step_ms_total += report.step_ms;
  metrics_.schedule_ms_total += sched_ms;
  metrics_.decode_steps = sched_.decode_steps;
  metrics_.speculative_steps = sched_.speculative_steps;
  metrics_.probe_steps = sched_.probe_steps;
  metrics_.plain_probe_steps = sched_.plain_probe_steps;
  if (config_.on_step) config_.on_step(report);
  if (prefix_cache_) {
    std::vector<KvCacheEvent> events = prefix_cache_->take_events();
    if (!events.empty() && config_.on_kv_events) config_.on_kv_events(events);
  }
  // The policy learns what a step really cost its requests: the step's callback (a server's bookkeeping, a log
  // line) included, the drafter's backlog (deferred work of earlier steps, StepReport::backlog_ms) left out.
  seen.actual_ms = now_ms() - t0 - report.backlog_ms;
  if (seen.modelled_ms > 0 && !config_.deterministic_trees) sched::observe_step(sched_, seen);
  return report;
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m = metrics_;
  m.num_requests_waiting = num_waiting();
  m.num_requests_running = num_running();
  int64_t used = 0;
  // Own rows of every request, and the shared blocks they read once.
  for (const auto& [id, live] : live_) used += live->cache.length() + live->cache.pending() - live->cache.shared_rows();
  if (prefix_cache_) used += prefix_cache_->pinned_rows();
  const double budget = double(sched_.config.kv_budget_rows);
  m.tree_node_ms = node_work_ms_.estimate();
  m.kv_cache_usage_perc = budget > 0 ? double(used) / budget : 0;
  m.kv_reserved_perc = budget > 0 ? double(sched::reserved_rows(sched_)) / budget : 0;
  m.prefix_cache_blocks = prefix_cache_ ? prefix_cache_->blocks() : 0;
  return m;
}

}  // namespace ts
