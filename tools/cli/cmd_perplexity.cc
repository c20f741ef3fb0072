// treespark perplexity: mean negative log-likelihood of an id sequence under the target.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "decode_flags.h"
#include "model/target_model.h"

namespace ts::cli {

int cmd_perplexity(int argc, char** argv) {
  CLI::App app{"Mean NLL and perplexity of a token id sequence."};
  std::string model_dir, ids_file;
  bool json = false;
  int window = 0, threads = 0;
  app.add_option("--model", model_dir, "target model folder")->required();
  app.add_option("--ids-file", ids_file, "file of comma- or space-separated token ids")->required();
  app.add_option("--window", window, "tokens per window (default: the model's context)");
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  std::string quantize = "native";
  add_quantize_option(app, &quantize);
  app.add_flag("--json", json, "print a JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  LoadOptions load_options;
  load_options.weights = parse_weight_scheme(quantize);
  auto model = TargetModel::load(model_dir, load_options);
  configure_for_model(model->weight_bytes(), threads);
  const std::vector<int32_t> ids = parse_ids(read_text_file(ids_file));
  TS_CHECK(ids.size() >= 2, ids_file, ": need at least 2 token ids, found ", ids.size());
  const int V = model->config().vocab_size;
  if (window <= 0) window = std::min(model->config().max_position_embeddings, 2048);
  TS_CHECK(window >= 2, "--window must be at least 2");

  // Non-overlapping windows; each scores its tokens after the first.
  double nll = 0;
  long scored = 0;
  for (size_t start = 0; start + 1 < ids.size(); start += window) {
    const size_t end = std::min(ids.size(), start + window);
    KVCache cache = model->new_cache(window);
    ForwardBatch b;
    for (size_t i = start; i < end; ++i) {
      b.tokens.push_back(ids[i]);
      b.positions.push_back(int(i - start));
      if (i + 1 < end) b.logit_rows.push_back(int(i - start));
    }
    ForwardResult r;
    model->forward(b, {&cache}, &r);
    for (size_t k = 0; k < b.logit_rows.size(); ++k) {
      const float* row = &r.logits[k * V];
      double mx = row[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double z = 0;
      for (int v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
      nll += mx + std::log(z) - row[ids[start + k + 1]];
      ++scored;
    }
  }
  const double mean = nll / double(scored);
  if (json) {
    nlohmann::json j{{"mean_nll", mean}, {"ppl", std::exp(mean)}, {"tokens_scored", scored}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("mean_nll %.6f\nppl %.4f\ntokens_scored %ld\n", mean, std::exp(mean), scored);
  }
  return 0;
}

}  // namespace ts::cli
