#include "server/model_setup.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"
#include "engine/cost_curve.h"

namespace ts::server {

ServedModel describe_model(const ModelBundle& bundle, const std::string& name, int max_context) {
  TS_CHECK(bundle.tokenizer, "serving needs a tokenizer.json in ", bundle.model_dir);
  ServedModel m;
  m.name = name;
  m.tokenizer = bundle.tokenizer.get();
  m.chat_template = bundle.chat_template.get();
  m.stop_ids = bundle.stop_ids();
  m.max_context = max_context;
  m.vocab_size = bundle.target->config().vocab_size;
  return m;
}

std::vector<int> batch_ladder(int max_batch) {
  std::vector<int> b;
  for (int x = 1; x < max_batch; x *= 2) b.push_back(x);
  b.push_back(std::max(1, max_batch));
  return b;
}

spec::CostModel read_cost_model_json(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in, "cannot read the cost curve ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  TS_CHECK(!j.is_discarded() && j.is_object() && j.contains("points") && j["points"].is_array(), path,
           ": expected an object with a \"points\" array (treespark bench forward --json)");
  std::map<std::pair<int, int>, double> grid;
  std::vector<int> batches, ks;
  for (const auto& p : j["points"]) {
    TS_CHECK(p.is_object() && p.contains("batch") && p.contains("k") && p.contains("ms") && p["batch"].is_number_integer() &&
                 p["k"].is_number_integer() && p["ms"].is_number(),
             path, ": every point needs integer batch, k and a number ms");
    const int b = p["batch"], k = p["k"];
    grid[{b, k}] = p["ms"].get<double>();
    batches.push_back(b);
    ks.push_back(k);
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  spec::CostModel c;
  c.batches = batches;
  c.tokens = ks;
  for (int b : batches)
    for (int k : ks) {
      auto it = grid.find({b, k});
      TS_CHECK(it != grid.end(), path, ": the grid has no point for batch ", b, ", k ", k);
      c.ms.push_back(it->second);
    }
  if (j.contains("fixed_ms")) c.fixed_ms = j["fixed_ms"].get<double>();
  if (j.contains("fixed_ms_by_batch")) c.fixed_ms_by_batch = j["fixed_ms_by_batch"].get<std::vector<double>>();
  c.validate();
  return c;
}

void write_cost_model_json(const spec::CostModel& c, const std::string& path) {
  nlohmann::json points = nlohmann::json::array();
  for (size_t bi = 0; bi < c.batches.size(); ++bi)
    for (size_t ki = 0; ki < c.tokens.size(); ++ki)
      points.push_back({{"batch", c.batches[bi]}, {"k", c.tokens[ki]}, {"ms", c.ms[bi * c.tokens.size() + ki]}});
  nlohmann::json j = {{"points", points}, {"fixed_ms", c.fixed_ms}, {"fixed_ms_by_batch", c.fixed_ms_by_batch}};
  std::ofstream out(path);
  TS_CHECK(out, "cannot write ", path);
  out << j.dump(1) << "\n";
}

spec::CostModel measure_serving_cost(ModelBundle& bundle, const std::vector<int>& batches, int reps) {
  CostCurveOptions co;
  co.context = std::min(256, bundle.target->config().max_position_embeddings - 80);
  co.batches = batches;
  co.ks = {1, 2, 4, 8, 16, 32};
  co.reps = reps;
  spec::CostModel cost = measure_cost_curve(*bundle.target, co);
  if (!bundle.drafter) return cost;
  Drafter& d = *bundle.drafter;
  cost.fixed_ms = measure_draft_ms(d, co.context, reps);
  // F(b): one batched drafter forward over b blocks, each over its own context of co.context rows.
  std::vector<float> taps(size_t(co.context) * d.tap_width(), 0.5f);  // [context, tap_width]
  std::vector<int32_t> positions(co.context);
  for (int i = 0; i < co.context; ++i) positions[i] = i;
  const int max_b = batches.back();
  std::vector<DrafterState> states;
  states.reserve(size_t(max_b));
  for (int i = 0; i < max_b; ++i) {
    states.push_back(d.new_state(co.context + 1));
    d.extend_context(states.back(), taps.data(), positions.data(), co.context);
  }
  std::vector<float> logits(size_t(max_b) * d.block_size() * d.vocab_size());  // [b, block, vocab]
  for (int b : batches) {
    std::vector<DrafterState*> ptrs;
    for (int i = 0; i < b; ++i) ptrs.push_back(&states[size_t(i)]);
    std::vector<int32_t> anchors(size_t(b), 1), anchor_pos(size_t(b), co.context);
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = now_ms();
      d.draft_blocks(ptrs, anchors.data(), anchor_pos.data(), logits.data());
      if (r > 0) times.push_back(now_ms() - t0);
    }
    std::sort(times.begin(), times.end());
    cost.fixed_ms_by_batch.push_back(times[times.size() / 2]);
  }
  cost.validate();
  return cost;
}

}  // namespace ts::server
