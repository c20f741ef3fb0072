// treespark calibrate: fit the edge-acceptance calibration p_hat = sigmoid(a * logit(q) + b) for one model pair
// and temperature from verification labels, and store it in treespark_calibration.json beside the drafter.
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

#include "commands.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/model_bundle.h"
#include "prompt_file.h"
#include "spec/calibration_file.h"

namespace ts::cli {

int cmd_calibrate(int argc, char** argv) {
  CLI::App app{"Fit the draft-edge acceptance calibration from verification outcomes."};
  std::string model_dir, drafter_dir, prompts, out;
  std::vector<std::string> holdout;
  DecodeFlags flags;
  flags.max_tokens = 96;
  flags.node_cap = 24;
  flags.theta = 0.0;
  app.add_option("--model", model_dir, "target model folder")->required();
  app.add_option("--drafter", drafter_dir, "drafter folder")->required();
  app.add_option("--prompts", prompts, "JSONL prompt set")->required();
  app.add_option("--out", out, "output file (default: DRAFTER/treespark_calibration.json)");
  app.add_option("--holdout-prompts", holdout,
                 "JSONL prompt sets whose edges are NOT fitted: ECE before/after the fit is also reported on them");
  flags.add_sampling(app);
  flags.add_spec(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (out.empty()) out = drafter_dir + "/" + spec::kCalibrationFileName;
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir);
  flags.apply_threads(bundle.target->weight_bytes());
  bundle.set_kv_dtype(flags.kv_dtype);
  flags.apply_generation_config(bundle.generation_config);  // calibrate at the temperature generate would use
  PromptSet set = load_prompt_set(prompts, bundle);
  GenerateOptions opt = flags.options(bundle.drafter->block_size());
  opt.mode = DecodeMode::Tree;
  opt.collect_edges = true;
  opt.online_calibration = false;
  opt.stop_ids = bundle.stop_ids();
  // Labels are collected under the uncalibrated priority (a = 1, b = 0), so the fit does not depend on an
  // earlier fit; the tree (theta 0, node cap) offers siblings at every depth.
  Generator gen(*bundle.target, bundle.drafter.get(), spec::Calibration{});
  auto collect = [&](const PromptSet& prompt_set, uint64_t seed0) {
    std::vector<spec::EdgeRecord> out_edges;
    for (size_t i = 0; i < prompt_set.prompt_ids.size(); ++i) {
      opt.sampling.seed = seed0 + i;
      GenerationResult r = gen.generate(prompt_set.prompt_ids[i], opt);
      out_edges.insert(out_edges.end(), r.edges.begin(), r.edges.end());
    }
    return out_edges;
  };
  std::vector<spec::EdgeRecord> edges = collect(set, flags.seed);
  TS_CHECK(!edges.empty(), "no verification edges were collected");
  spec::CalibrationEntry entry =
      spec::fit_calibration_entry(edges, flags.temperature, {flags.top_k, flags.top_p, flags.min_p});
  spec::CalibrationTable table = spec::read_calibration_table(out);
  table.upsert(entry);
  spec::write_calibration_table(out, table);
  std::printf("temperature %.3g (top-k %d, top-p %.3g, min-p %.3g): a = %.4f, b = %.4f from %lld edges; ECE %.4f "
              "before, %.4f after -> %s\n",
              entry.temperature, entry.filter.top_k, entry.filter.top_p, entry.filter.min_p, entry.a, entry.b,
              (long long)entry.edges, entry.ece_before, entry.ece_after, out.c_str());
  {
    // Reliability by depth and sibling rank: what the fit can and cannot express (it has no depth term).
    const spec::Calibration fitted = table.lookup(entry.temperature, entry.filter);
    std::map<std::pair<int, int>, std::array<double, 3>> cells;  // (depth, rank bucket) -> {n, labels, p_hat}
    for (const spec::EdgeRecord& e : edges) {
      auto& c = cells[{e.depth, spec::rank_bucket(e.sibling_rank)}];
      const double q = 1 / (1 + std::exp(-e.logit_q));
      c[0] += 1, c[1] += e.accepted, c[2] += fitted.p_hat(q, e.sibling_rank);
    }
    std::printf("depth rank  edges  accepted  mean p_hat\n");
    for (const auto& [key, c] : cells)
      std::printf("%5d %4d %6.0f  %8.3f  %10.3f\n", key.first, key.second, c[0], c[1] / c[0], c[2] / c[0]);
  }
  if (!holdout.empty()) {
    std::vector<spec::EdgeRecord> held;
    for (const std::string& file : holdout) {
      std::vector<spec::EdgeRecord> e = collect(load_prompt_set(file, bundle), flags.seed + 100000);
      held.insert(held.end(), e.begin(), e.end());
    }
    TS_CHECK(!held.empty(), "no verification edges were collected on the held-out prompts");
    spec::Calibration fitted = table.lookup(entry.temperature, entry.filter);
    std::printf("held-out (%zu prompt sets, %zu edges, not fitted): ECE %.4f before, %.4f after\n", holdout.size(),
                held.size(), spec::expected_calibration_error(held, spec::Calibration{}),
                spec::expected_calibration_error(held, fitted));
  }
  return 0;
}

}  // namespace ts::cli
