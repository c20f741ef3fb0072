#include "engine/cost_curve.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace ts {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

spec::CostModel measure_cost_curve(TargetModel& model, const CostCurveOptions& opt) {
  const ModelConfig& c = model.config();
  const int max_k = *std::max_element(opt.ks.begin(), opt.ks.end());
  TS_CHECK(opt.context + max_k <= c.max_position_embeddings, "cost curve: context ", opt.context, " + k ", max_k,
           " exceeds the model's ", c.max_position_embeddings, " positions");
  spec::CostModel cost;
  cost.batches = opt.batches;
  cost.tokens = opt.ks;
  for (int b : opt.batches) {
    std::vector<KVCache> caches;
    for (int s = 0; s < b; ++s) caches.push_back(model.new_cache(opt.context + max_k));
    std::vector<KVCache*> ptrs;
    for (auto& cache : caches) ptrs.push_back(&cache);
    // Fill each sequence's context once, in chunks of 128 tokens.
    for (int s = 0; s < b; ++s) {
      for (int start = 0; start < opt.context; start += 128) {
        ForwardBatch fb;
        ForwardResult fr;
        for (int i = start; i < std::min(opt.context, start + 128); ++i) {
          fb.tokens.push_back((i * 7919 + s) % c.vocab_size);
          fb.positions.push_back(i);
        }
        model.forward(fb, {ptrs[s]}, &fr);
        ptrs[s]->commit_all();
      }
    }
    for (int k : opt.ks) {
      ForwardBatch fb;
      for (int s = 0; s < b; ++s)
        for (int i = 0; i < k; ++i) {
          fb.tokens.push_back((s * 31 + i * 17) % c.vocab_size);
          fb.positions.push_back(opt.context + i);
          fb.seq.push_back(s);
          fb.logit_rows.push_back(int(fb.tokens.size()) - 1);  // a verify forward wants every row's logits
        }
      std::vector<double> times;
      for (int r = 0; r < opt.reps + 1; ++r) {
        ForwardResult fr;
        const double t0 = now_ms();
        model.forward(fb, ptrs, &fr);
        const double ms = now_ms() - t0;
        for (auto* cache : ptrs) cache->drop_pending();
        if (r > 0) times.push_back(ms);
      }
      cost.ms.push_back(median(times));
    }
  }
  cost.validate();
  return cost;
}

double measure_draft_ms(Drafter& drafter, int context, int reps) {
  DrafterState state = drafter.new_state(context + 1);
  std::vector<float> taps(size_t(context) * drafter.tap_width(), 0.5f);  // [context, tap_width]
  std::vector<int32_t> positions(context);
  for (int i = 0; i < context; ++i) positions[i] = i;
  drafter.extend_context(state, taps.data(), positions.data(), context);
  std::vector<float> base_logits(size_t(drafter.block_size()) * drafter.vocab_size());  // [block, vocab]
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now_ms();
    drafter.draft_block(state, 1, context, base_logits.data());
    if (r > 0) times.push_back(now_ms() - t0);  // the first run warms up
  }
  return median(times);
}

}  // namespace ts
