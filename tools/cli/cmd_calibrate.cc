// treespark calibrate: fit the edge-acceptance calibration p_hat = sigmoid(a * logit(q) + b + rank offset + depth
// offset) (spec/calibration.h) for one model pair and temperature from verification labels, and store it in
// treespark_calibration.json beside the drafter.
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "decode_flags.h"
#include "engine/model_bundle.h"
#include "prompt_file.h"
#include "spec_decode/calibration_file.h"

namespace ts::cli {

int cmd_calibrate(int argc, char** argv) {
  CLI::App app{"Fit the draft-edge acceptance calibration from verification outcomes."};
  std::string model_dir, drafter_dir, prompts, out;
  std::vector<std::string> holdout;
  std::string dump_edges;
  int chain_len = -1;
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
  app.add_option("--chain-len", chain_len,
                 "also decode every prompt as a chain of this many nodes (default: the drafter's block size; 0: trees "
                 "only); chains reach the depths that theta-0 trees seldom do, so every depth offset has edges")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dump-edges", dump_edges,
                 "write every edge record as CSV (set,depth,rank,logit_q,accepted; set 0 = fitted, 1 = held out), to "
                 "try other fits on the same labels");
  flags.add_sampling(app);
  flags.add_spec(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (out.empty()) out = drafter_dir + "/" + spec_decode::kCalibrationFileName;
  ModelBundle bundle = ModelBundle::load(model_dir, drafter_dir, flags.quantize, flags.drafter_quantize);
  flags.apply_threads(bundle.target->weight_bytes());
  bundle.set_kv_dtype(flags.kv_dtype);
  flags.apply_generation_config(bundle.generation_config);  // calibrate at the temperature generate would use
  PromptSet set = load_prompt_set(prompts, bundle);
  GenerateOptions opt = flags.options(bundle.drafter->block_size());
  opt.mode = DecodeMode::Tree;
  opt.collect_edges = true;
  opt.online_calibration = false;
  opt.stop_ids = bundle.stop_ids();
  if (chain_len < 0) chain_len = bundle.drafter->block_size();
  GenerateOptions chain_opt = opt;
  chain_opt.mode = DecodeMode::Chain;
  chain_opt.tree.draft_len = chain_len;
  chain_opt.tree.node_cap = chain_len;
  // Labels are collected under the uncalibrated priority (a = 1, b = 0), so the fit does not depend on an
  // earlier fit; the tree (theta 0, node cap) offers siblings at every depth, the chain first children deep down
  // (a theta-0 tree spends its nodes on the shallow siblings of likely paths: few of its edges are past depth 3).
  Generator gen(*bundle.target, bundle.drafter.get(), spec_decode::Calibration{});
  auto collect = [&](const PromptSet& prompt_set, uint64_t seed0) {
    std::vector<spec_decode::EdgeRecord> out_edges;
    for (size_t i = 0; i < prompt_set.prompt_ids.size(); ++i) {
      for (GenerateOptions* o : {&opt, &chain_opt}) {
        if (o == &chain_opt && chain_len == 0) continue;
        o->sampling.seed = seed0 + i + (o == &chain_opt ? 50000 : 0);
        GenerationResult r = gen.generate(prompt_set.prompt_ids[i], *o);
        out_edges.insert(out_edges.end(), r.edges.begin(), r.edges.end());
      }
    }
    return out_edges;
  };
  std::vector<spec_decode::EdgeRecord> edges = collect(set, flags.seed);
  TS_CHECK(!edges.empty(), "no verification edges were collected");
  spec_decode::CalibrationEntry entry =
      spec_decode::fit_calibration_entry(edges, flags.temperature, {flags.top_k, flags.top_p, flags.min_p});
  // Labelled with the pair's weight formats: another format's entries stay (CalibrationTable::for_weights).
  entry.weights = bundle.target->weight_format();
  entry.drafter_weights = bundle.drafter->weight_format();
  spec_decode::CalibrationTable table = spec_decode::read_calibration_table(out);
  std::optional<spec_decode::Calibration> replaced;  // the entry this fit replaces, to compare on the held-out edges
  for (const spec_decode::CalibrationEntry& old : table.entries)
    if (spec_decode::same_key(old, entry)) replaced = old.calibration();
  // The same fit without depth offsets (every edge at depth 1): what the depth offsets add.
  std::vector<spec_decode::EdgeRecord> no_depth = edges;
  for (spec_decode::EdgeRecord& e : no_depth) e.depth = 1;
  const spec_decode::Calibration rank_only = spec_decode::fit_calibration(no_depth);
  const spec_decode::Calibration fitted = entry.calibration();
  std::vector<spec_decode::EdgeRecord> held;
  for (const std::string& file : holdout) {
    std::vector<spec_decode::EdgeRecord> e = collect(load_prompt_set(file, bundle), flags.seed + 100000);
    held.insert(held.end(), e.begin(), e.end());
  }
  TS_CHECK(holdout.empty() || !held.empty(), "no verification edges were collected on the held-out prompts");
  if (!held.empty()) spec_decode::measure_held_out(held, &entry);
  table.upsert(entry);
  spec_decode::write_calibration_table(out, table);
  if (!dump_edges.empty()) {
    std::FILE* f = std::fopen(dump_edges.c_str(), "w");
    TS_CHECK(f, "cannot open ", dump_edges, " for writing");
    std::fprintf(f, "set,depth,rank,logit_q,accepted\n");
    for (int set = 0; set < 2; ++set)
      for (const spec_decode::EdgeRecord& e : set == 0 ? edges : held)
        std::fprintf(f, "%d,%d,%d,%.9g,%d\n", set, e.depth, e.sibling_rank, e.logit_q, e.accepted);
    TS_CHECK(std::fclose(f) == 0, "failed writing ", dump_edges);
  }

  std::printf("temperature %.3g (top-k %d, top-p %.3g, min-p %.3g, chains of %d): a = %.4f, b = %.4f from %lld "
              "edges; ECE %.4f before, %.4f after -> %s\n",
              entry.temperature, entry.filter.top_k, entry.filter.top_p, entry.filter.min_p, chain_len, entry.a,
              entry.b, (long long)entry.edges, entry.ece_before, entry.ece_after, out.c_str());
  std::printf("rank offsets (1, 2, >= 3): %.3f %.3f %.3f; depth offsets (2, 3, >= 4): %.3f %.3f %.3f\n",
              fitted.rank_offset[1], fitted.rank_offset[2], fitted.rank_offset[3], fitted.depth_offset[1],
              fitted.depth_offset[2], fitted.depth_offset[3]);
  // Reliability by depth and sibling rank: what the fit expresses (additive rank and depth terms) and what not.
  auto cells_table = [&](const std::vector<spec_decode::EdgeRecord>& on) {
    std::map<std::pair<int, int>, std::array<double, 3>> cells;  // (depth, rank bucket) -> {n, labels, p_hat}
    for (const spec_decode::EdgeRecord& e : on) {
      auto& c = cells[{e.depth, spec_decode::rank_bucket(e.sibling_rank)}];
      c[0] += 1, c[1] += e.accepted, c[2] += fitted.p_hat_of_logit(e.logit_q, e.sibling_rank, e.depth);
    }
    std::printf("depth rank  edges  accepted  mean p_hat\n");
    for (const auto& [key, c] : cells)
      std::printf("%5d %4d %6.0f  %8.3f  %10.3f\n", key.first, key.second, c[0], c[1] / c[0], c[2] / c[0]);
  };
  cells_table(edges);
  // ECE per depth bucket (depth 1, 2, 3, >= 4) of each calibration on one edge set.
  auto by_depth = [&](const std::vector<spec_decode::EdgeRecord>& on) {
    std::printf("%-34s", "edges");
    const spec_decode::DepthEce counts = spec_decode::expected_calibration_error_by_depth(on, spec_decode::Calibration{});
    for (int k = 0; k < spec_decode::kDepthBuckets; ++k) std::printf(" %8lld", (long long)counts.edges[k]);
    std::printf("\n");
    std::vector<std::pair<const char*, spec_decode::Calibration>> rows = {
        {"p_hat = q", spec_decode::Calibration{}}, {"fit without depth offsets", rank_only}};
    if (replaced) rows.push_back({"the entry replaced", *replaced});
    rows.push_back({"this fit", fitted});
    for (const auto& [name, c] : rows) {
      const spec_decode::DepthEce d = spec_decode::expected_calibration_error_by_depth(on, c);
      std::printf("%-34s", name);
      for (int k = 0; k < spec_decode::kDepthBuckets; ++k) std::printf(" %8.4f", d.ece[k]);
      std::printf("   (all: %.4f)\n", spec_decode::expected_calibration_error(on, c));
    }
  };
  std::printf("ECE by depth, fitting edges          depth 1  depth 2  depth 3  depth>=4\n");
  by_depth(edges);
  if (!held.empty()) {
    std::printf("held-out (%zu prompt sets, %zu edges, not fitted): ECE %.4f before, %.4f after\n", holdout.size(),
                held.size(), entry.held_out->ece_before, entry.held_out->ece_after);
    std::printf("ECE by depth, held-out edges         depth 1  depth 2  depth 3  depth>=4\n");
    by_depth(held);
    std::printf("held-out ");
    cells_table(held);
  }
  return 0;
}

}  // namespace ts::cli
