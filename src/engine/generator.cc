#include "engine/generator.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "sampling/chooser.h"
#include "sampling/distribution.h"
#include "spec/verify.h"

namespace ts {

namespace {

// Rows `rows` of the tap outputs hidden: [n_taps, n, Ht] as drafter context rows: [rows.size(), n_taps * Ht].
std::vector<float> gather_taps(const std::vector<float>& hidden, int n_taps, int n, int hidden_size,
                               const std::vector<int32_t>& rows) {
  std::vector<float> out(rows.size() * size_t(n_taps) * hidden_size);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int t = 0; t < n_taps; ++t)
      std::memcpy(&out[(i * n_taps + t) * hidden_size], &hidden[(size_t(t) * n + rows[i]) * hidden_size],
                  sizeof(float) * hidden_size);
  return out;
}

int32_t sample_token(const float* logits, int vocab, const SamplingParams& params, Chooser& chooser,
                     std::vector<double>& probs) {
  if (params.temperature == 0) return argmax(logits, vocab);
  processed_distribution(logits, vocab, params, &probs);
  return chooser.choose(probs.data(), vocab);
}

}  // namespace

Generator::Generator(TargetModel& target, Drafter* drafter, spec::Calibration calibration)
    : target_(target), drafter_(drafter), calibration_(calibration) {
  if (!drafter_) return;
  const ModelConfig& t = target_.config();
  const DrafterConfig& d = drafter_->config();
  TS_CHECK(d.vocab_size == t.vocab_size, "drafter vocab_size ", d.vocab_size, " != target vocab_size ", t.vocab_size);
  TS_CHECK(d.target_hidden_size == t.hidden_size, "drafter target_hidden_size ", d.target_hidden_size,
           " != target hidden_size ", t.hidden_size);
  for (int32_t l : d.target_layer_ids)
    TS_CHECK(l < t.num_layers, "drafter target_layer_ids has layer ", l, " but the target has ", t.num_layers);
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                     const std::function<void(int32_t)>& on_token) {
  const double t_start = now_ms();
  validate_sampling_params(opt.sampling);
  const bool speculative = opt.mode != DecodeMode::None;
  TS_CHECK(!speculative || drafter_, "speculative decoding needs a drafter");
  TS_CHECK(!prompt.empty(), "empty prompt");
  TS_CHECK(opt.max_new_tokens >= 0, "max_new_tokens must be >= 0");
  const ModelConfig& cfg = target_.config();
  const int V = cfg.vocab_size;
  for (int32_t id : prompt) TS_CHECK(id >= 0 && id < V, "prompt token id ", id, " outside the vocabulary [0, ", V, ")");
  const int max_ctx = std::min(opt.max_context, cfg.max_position_embeddings);
  TS_CHECK(int(prompt.size()) < max_ctx, "prompt of ", prompt.size(), " tokens does not fit the context limit of ",
           max_ctx, " tokens");

  GenerationResult result;
  GenerationStats& st = result.stats;
  RandomChooser chooser(opt.sampling.seed);
  std::vector<double> probs;
  // Room for the context plus one round's pending tree rows (the tree may hold more nodes than it has depth).
  const int max_tree_rows = std::max(opt.tree.node_cap, opt.tree.draft_len) + 2;
  KVCache cache = target_.new_cache(max_ctx + (speculative ? max_tree_rows : 1));
  const std::vector<int32_t> taps = speculative ? drafter_->config().target_layer_ids : std::vector<int32_t>{};
  const int n_taps = int(taps.size()), H = cfg.hidden_size;
  DrafterState dstate;
  if (speculative) dstate = drafter_->new_state(max_ctx);
  if (speculative) st.accepted_at_depth.assign(drafter_->block_size() + 1, 0);

  // Emits a token; returns false when generation must end.
  bool done = false;
  auto emit = [&](int32_t id) {
    if (done) return;
    result.ids.push_back(id);
    if (on_token) on_token(id);
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end()) {
      result.finish_reason = "stop";
      done = true;
    } else if (int(result.ids.size()) >= opt.max_new_tokens) {
      result.finish_reason = "length";
      done = true;
    }
  };

  // Prefill: the whole prompt in one forward; its taps seed the drafter's context.
  ForwardResult fr;
  {
    const double t0 = now_ms();
    ForwardBatch b;
    b.tokens = prompt;
    for (int i = 0; i < int(prompt.size()); ++i) b.positions.push_back(i);
    b.logit_rows = {int(prompt.size()) - 1};
    b.hidden_layers = taps;
    target_.forward(b, {&cache}, &fr);
    cache.commit_all();
    ++st.target_forwards;
    if (speculative) {
      std::vector<int32_t> rows(prompt.size());
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
      auto ctx = gather_taps(fr.hidden, n_taps, int(prompt.size()), H, rows);
      drafter_->extend_context(dstate, ctx.data(), b.positions.data(), int(prompt.size()));
    }
    st.prefill_ms = now_ms() - t0;
  }
  if (opt.max_new_tokens == 0) {
    result.finish_reason = "length";
    st.total_ms = now_ms() - t_start;
    return result;
  }
  int32_t anchor = sample_token(fr.logits.data(), V, opt.sampling, chooser, probs);
  emit(anchor);

  std::vector<float> base_logits;  // [block_size, V]
  while (!done) {
    const int pos = cache.length();  // the anchor's position
    // Near the context limit a full block no longer fits: decode plainly for the rest.
    const bool round_fits = speculative && pos + drafter_->block_size() + 1 <= max_ctx;
    if (pos + 1 > max_ctx) {
      result.finish_reason = "length";
      break;
    }
    if (!round_fits) {
      ForwardBatch b;
      b.tokens = {anchor};
      b.positions = {pos};
      b.logit_rows = {0};
      b.hidden_layers = taps;
      target_.forward(b, {&cache}, &fr);
      cache.commit_all();
      ++st.target_forwards;
      if (speculative) {
        auto ctx = gather_taps(fr.hidden, n_taps, 1, H, {0});
        drafter_->extend_context(dstate, ctx.data(), &pos, 1);
      }
      anchor = sample_token(fr.logits.data(), V, opt.sampling, chooser, probs);
      emit(anchor);
      continue;
    }

    // Draft: one drafter forward, then tree growth.
    const int B = drafter_->block_size();
    double t0 = now_ms();
    base_logits.resize(size_t(B) * V);
    drafter_->draft_block(dstate, anchor, pos, base_logits.data());
    spec::DraftSource source;
    source.vocab = V;
    source.block_size = B;
    source.base_logits = [&](int depth, float* out) {
      std::memcpy(out, &base_logits[size_t(depth - 1) * V], sizeof(float) * V);
    };
    source.conditional_logits = [&](int depth, int32_t parent, float* out) {
      std::memcpy(out, &base_logits[size_t(depth - 1) * V], sizeof(float) * V);
      drafter_->add_markov_bias(parent, out);
    };
    double t1 = now_ms();
    st.draft_ms += t1 - t0;
    spec::TreeParams params = opt.tree;
    if (opt.mode == DecodeMode::Chain) {
      params.mode = spec::TreeMode::Chain;
      params.branch_cap = 1;
    }
    params.temperature = opt.sampling.temperature;
    spec::DraftTree tree = spec::expand(source, anchor, params, calibration_, chooser);
    double t2 = now_ms();
    st.expand_ms += t2 - t1;
    st.draft_ms += t2 - t1;

    // Verify: one target forward over [anchor + tree], then the walk.
    const int n = tree.size();
    ForwardBatch b;
    b.tokens = tree.token;
    b.visible = tree.ancestor_mask();
    for (int i = 0; i < n; ++i) {
      b.positions.push_back(pos + tree.depth[i]);
      b.logit_rows.push_back(i);
    }
    b.hidden_layers = taps;
    target_.forward(b, {&cache}, &fr);
    ++st.target_forwards;
    spec::VerifyResult vr = spec::verify(tree, fr.logits.data(), opt.sampling, source, chooser);
    std::vector<int32_t> keep = {0};
    keep.insert(keep.end(), vr.accepted_nodes.begin(), vr.accepted_nodes.end());
    cache.commit(keep);
    std::vector<int32_t> keep_positions;
    for (int32_t node : keep) keep_positions.push_back(pos + tree.depth[node]);
    auto ctx = gather_taps(fr.hidden, n_taps, n, H, keep);
    drafter_->extend_context(dstate, ctx.data(), keep_positions.data(), int(keep.size()));
    st.verify_ms += now_ms() - t2;

    ++st.rounds;
    st.tree_nodes += n - 1;
    st.accepted_draft_tokens += int(vr.accepted_nodes.size());
    st.accepted_at_depth[vr.accepted_nodes.size()] += 1;
    if (opt.collect_edges) result.edges.insert(result.edges.end(), vr.edges.begin(), vr.edges.end());
    for (int32_t node : vr.accepted_nodes) emit(tree.token[node]);
    emit(vr.bonus_token);
    anchor = vr.bonus_token;
  }
  st.generated_tokens = int(result.ids.size());
  st.total_ms = now_ms() - t_start;
  return result;
}

}  // namespace ts
