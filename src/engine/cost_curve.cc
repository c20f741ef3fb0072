#include "engine/cost_curve.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"

namespace ts {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<int> policy_token_counts() { return {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 24, 32}; }

void make_monotone_in_k(CostModel& cost) {
  const size_t K = cost.tokens.size();
  for (size_t b = 0; b < cost.batches.size(); ++b) {
    double* row = &cost.ms[b * K];  // [K]
    // Pool adjacent violators: blocks of (mean, count), merged while a block's mean exceeds the next one's.
    std::vector<double> mean;
    std::vector<int> count;
    for (size_t j = 0; j < K; ++j) {
      mean.push_back(row[j]);
      count.push_back(1);
      while (mean.size() > 1 && mean[mean.size() - 2] > mean.back()) {
        const size_t n = mean.size();
        const int c = count[n - 2] + count[n - 1];
        mean[n - 2] = (mean[n - 2] * count[n - 2] + mean[n - 1] * count[n - 1]) / c;
        count[n - 2] = c;
        mean.pop_back();
        count.pop_back();
      }
    }
    size_t j = 0;
    for (size_t blk = 0; blk < mean.size(); ++blk)
      for (int i = 0; i < count[blk]; ++i) row[j++] = mean[blk];
  }
}

void fill_context(TargetModel& model, KVCache& cache, int tokens, int salt) {
  const int vocab = model.config().vocab_size;
  for (int start = 0; start < tokens; start += 128) {
    ForwardBatch fb;
    ForwardResult fr;
    for (int i = start; i < std::min(tokens, start + 128); ++i) {
      fb.tokens.push_back((i * 7919 + salt) % vocab);
      fb.positions.push_back(i);
    }
    model.forward(fb, {&cache}, &fr);
    cache.commit_all();
  }
}

namespace {

// The context term of L (CostModel::context): one sequence filled to opt.context and one to opt.long_context,
// k = 1 and k = max_k timed on both, alternated rep by rep so drift hits both contexts alike. The slopes follow
// from the two differences: per context token ms_per_context_seq = d(k=1), ms_per_context_row = (d(max_k) -
// d(1)) / (max_k - 1); a noisy negative difference counts as none.
void fit_context_term(TargetModel& model, const CostCurveOptions& opt, int max_k, CostModel& cost) {
  const ModelConfig& c = model.config();
  const int long_ctx = std::min(opt.long_context, c.max_position_embeddings - max_k);
  if (long_ctx <= opt.context || max_k < 2) return;
  const int contexts[2] = {opt.context, long_ctx};
  std::vector<KVCache> caches;
  for (int ctx : contexts) {
    caches.push_back(model.new_cache(ctx + max_k));
    fill_context(model, caches.back(), ctx, 0);
  }
  const int ks[2] = {1, max_k};
  std::vector<double> times[2][2];  // [context][k] ms
  for (int r = 0; r < opt.reps + 1; ++r)
    for (int ci = 0; ci < 2; ++ci)
      for (int ki = 0; ki < 2; ++ki) {
        ForwardBatch fb;
        for (int i = 0; i < ks[ki]; ++i) {
          fb.tokens.push_back((i * 17 + 5) % c.vocab_size);
          fb.positions.push_back(contexts[ci] + i);
          fb.seq.push_back(0);
          fb.logit_rows.push_back(i);
        }
        ForwardResult fr;
        const double t0 = now_ms();
        model.forward(fb, {&caches[ci]}, &fr);
        const double ms = now_ms() - t0;
        caches[ci].drop_pending();
        if (r > 0) times[ci][ki].push_back(ms);  // r = 0 warms up
      }
  const double span = long_ctx - opt.context;
  const double d1 = std::max(0.0, median(times[1][0]) - median(times[0][0]));
  const double dk = std::max(d1, median(times[1][1]) - median(times[0][1]));
  cost.context = opt.context;
  cost.ms_per_context_seq = d1 / span;
  cost.ms_per_context_row = (dk - d1) / (span * (max_k - 1));
}

}  // namespace

CostModel measure_cost_curve(TargetModel& model, const CostCurveOptions& opt) {
  const ModelConfig& c = model.config();
  const int max_k = *std::max_element(opt.ks.begin(), opt.ks.end());
  TS_CHECK(opt.context + max_k <= c.max_position_embeddings, "cost curve: context ", opt.context, " + k ", max_k,
           " exceeds the model's ", c.max_position_embeddings, " positions");
  CostModel cost;
  cost.batches = opt.batches;
  cost.tokens = opt.ks;
  for (int b : opt.batches) {
    std::vector<KVCache> caches;
    for (int s = 0; s < b; ++s) caches.push_back(model.new_cache(opt.context + max_k));
    std::vector<KVCache*> ptrs;
    for (auto& cache : caches) ptrs.push_back(&cache);
    for (int s = 0; s < b; ++s) fill_context(model, *ptrs[s], opt.context, s);
    // Round-robin over k within each repetition (not all of k = 1's runs, then all of k = 2's, ...): the machine's
    // load drifts over seconds, and the policy prices nodes by the curve's shape, so each point's runs should
    // see the same mix of quiet and busy moments as its neighbours'. Repetitions alternate up and down the ks, so
    // every timed forward follows one of a neighbouring k: timed right after the largest k, k = 1 of the quantized
    // shipped target cost ~1.3x a decode step's forward (Zen 4), which priced plain decoding too high.
    std::vector<ForwardBatch> batches_by_k;  // [ks]
    for (int k : opt.ks) {
      ForwardBatch& fb = batches_by_k.emplace_back();
      for (int s = 0; s < b; ++s)
        for (int i = 0; i < k; ++i) {
          fb.tokens.push_back((s * 31 + i * 17) % c.vocab_size);
          fb.positions.push_back(opt.context + i);
          fb.seq.push_back(s);
          fb.logit_rows.push_back(int(fb.tokens.size()) - 1);  // a verify forward wants every row's logits
        }
    }
    std::vector<std::vector<double>> times(opt.ks.size());  // [ks][reps] ms
    for (int r = 0; r < opt.reps + 1; ++r)
      for (size_t step = 0; step < opt.ks.size(); ++step) {
        const size_t ki = r % 2 == 0 ? step : opt.ks.size() - 1 - step;
        ForwardResult fr;
        const double t0 = now_ms();
        model.forward(batches_by_k[ki], ptrs, &fr);
        const double ms = now_ms() - t0;
        for (auto* cache : ptrs) cache->drop_pending();
        if (r > 0) times[ki].push_back(ms);  // r = 0 warms up
      }
    for (auto& t : times) cost.ms.push_back(median(t));
  }
  if (opt.monotone) make_monotone_in_k(cost);
  if (opt.long_context > opt.context) fit_context_term(model, opt, max_k, cost);
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

std::vector<double> measure_draft_ms_by_batch(Drafter& drafter, int context, const std::vector<int>& batches,
                                              int reps) {
  const int max_b = batches.empty() ? 0 : *std::max_element(batches.begin(), batches.end());
  std::vector<DrafterState> states;
  std::vector<float> taps(size_t(context) * drafter.tap_width(), 0.5f);  // [context, tap_width]
  std::vector<int32_t> positions(context);
  for (int i = 0; i < context; ++i) positions[i] = i;
  for (int s = 0; s < max_b; ++s) {
    states.push_back(drafter.new_state(context + 1));
    drafter.extend_context(states.back(), taps.data(), positions.data(), context);
  }
  std::vector<double> out;
  for (int b : batches) {
    std::vector<DrafterState*> ptrs;
    for (int s = 0; s < b; ++s) ptrs.push_back(&states[s]);
    std::vector<int32_t> anchors(b, 1), anchor_pos(b, context);
    std::vector<float> logits(size_t(b) * drafter.block_size() * drafter.vocab_size());  // [b, block, vocab]
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = now_ms();
      drafter.draft_blocks(ptrs, anchors.data(), anchor_pos.data(), logits.data());
      if (r > 0) times.push_back(now_ms() - t0);
    }
    out.push_back(median(times));
  }
  return out;
}

CostModel measure_serving_cost(TargetModel& target, Drafter* drafter, const ServingCostOptions& o) {
  CostCurveOptions co;
  co.context = std::min(o.context, target.config().max_position_embeddings -
                                       *std::max_element(o.ks.begin(), o.ks.end()) - 1);
  co.ks = o.ks;
  co.batches = o.batches;
  co.reps = o.reps;
  co.monotone = true;
  co.long_context = o.long_context;
  CostModel cost = measure_cost_curve(target, co);
  if (drafter) {
    cost.fixed_ms_by_batch = measure_draft_ms_by_batch(*drafter, co.context, o.batches, o.reps);
    cost.fixed_ms = cost.fixed_ms_by_batch.front();
  }
  cost.validate();
  return cost;
}

std::string cost_model_to_json(const CostModel& c) {
  nlohmann::json j;
  j["version"] = 1;
  j["batches"] = c.batches;
  j["tokens"] = c.tokens;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < c.batches.size(); ++i)
    rows.push_back(std::vector<double>(c.ms.begin() + i * c.tokens.size(), c.ms.begin() + (i + 1) * c.tokens.size()));
  j["ms"] = rows;
  j["fixed_ms"] = c.fixed_ms;
  j["fixed_ms_by_batch"] = c.fixed_ms_by_batch;
  if (c.context > 0) {
    j["context"] = c.context;
    j["ms_per_context_seq"] = c.ms_per_context_seq;
    j["ms_per_context_row"] = c.ms_per_context_row;
  }
  return j.dump(2) + "\n";
}

CostModel cost_model_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    TS_FAIL("cost model: malformed JSON: ", e.what());
  }
  TS_CHECK(j.is_object() && j.value("version", 0) == 1, "cost model: expected an object with \"version\": 1");
  for (const char* key : {"batches", "tokens", "ms"})
    TS_CHECK(j.contains(key) && j[key].is_array(), "cost model: missing array \"", key, "\"");
  CostModel c;
  try {
    c.batches = j["batches"].get<std::vector<int>>();
    c.tokens = j["tokens"].get<std::vector<int>>();
    for (const auto& row : j["ms"]) {
      const auto v = row.get<std::vector<double>>();
      TS_CHECK(v.size() == c.tokens.size(), "cost model: each \"ms\" row must hold ", c.tokens.size(), " costs");
      c.ms.insert(c.ms.end(), v.begin(), v.end());
    }
    c.fixed_ms = j.value("fixed_ms", 0.0);
    if (j.contains("fixed_ms_by_batch")) c.fixed_ms_by_batch = j["fixed_ms_by_batch"].get<std::vector<double>>();
    c.context = j.value("context", 0);
    c.ms_per_context_seq = j.value("ms_per_context_seq", 0.0);
    c.ms_per_context_row = j.value("ms_per_context_row", 0.0);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("cost model: wrong type: ", e.what());
  }
  c.validate();
  return c;
}

CostModel read_cost_model(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in, "cannot read cost model file ", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return cost_model_from_json(text.str());
  } catch (const Error& e) {
    TS_FAIL(path, ": ", e.what());
  }
}

void write_cost_model(const std::string& path, const CostModel& cost) {
  std::ofstream out(path);
  TS_CHECK(out, "cannot write cost model file ", path);
  out << cost_model_to_json(cost);
}

}  // namespace ts
