// treespark bench load: how long a model takes from its files to its first decoded token, for several models (or
// weight formats) side by side in one run. Per model and repetition: ModelBundle::load (parse, map, convert,
// quantize and pack the weights, tokenizer and chat template when present) and one decode step of one token
// (ready = that token's logits exist), timed in-process; the files are read once first, so the page cache is
// warm (the case of a restarted server; a cold disk adds its read time). Prints the median and the best of
// --repeats, the file size and the size's rate.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "benches.h"
#include "core/cpu.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/model_bundle.h"

namespace ts::bench {

namespace {

namespace fs = std::filesystem;

// Bytes of the model's files (a GGUF file, or a folder's *.safetensors), read through once so they sit in the page
// cache.
uint64_t warm_files(const std::string& path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors") files.push_back(e.path());
  } else {
    files.push_back(path);
  }
  uint64_t bytes = 0;
  std::vector<char> buf(size_t(1) << 22);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0) bytes += uint64_t(in.gcount());
  }
  return bytes;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int bench_load(int argc, char** argv) {
  CLI::App app{"Time from a model's files to its first decoded token (page cache warm), models side by side."};
  std::vector<std::string> models;
  std::string quantize = "native", json_path;
  int repeats = 3, threads = 0;
  app.add_option("--model", models, "model folders or .gguf files")->required();
  app.add_option("--quantize", quantize, "weight format applied to every model: native, q8_0, q4_0, q4_k_m");
  app.add_option("--repeats", repeats, "loads per model (median and best reported)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  app.add_option("--json", json_path, "write results here");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) set_num_threads(threads);

  std::printf("treespark bench load: %s, %d threads; page cache warm; %d loads per model\n", cpu_model_name().c_str(),
              num_threads(), repeats);
  std::printf("%-40s %10s %-12s %10s %10s %10s %10s\n", "model", "file MB", "weights", "load ms", "1st tok ms",
              "ready ms", "GB/s");
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& path : models) {
    const uint64_t bytes = warm_files(path);
    std::vector<double> load_ms, token_ms, ready_ms;
    std::string format;
    for (int r = 0; r < repeats; ++r) {
      const double t0 = now_ms();
      ModelBundle bundle = ModelBundle::load(path, "", quantize);
      const double t1 = now_ms();
      KVCache cache = bundle.target->new_cache(16);
      ForwardBatch batch;
      batch.tokens = {0};
      batch.positions = {0};
      batch.logit_rows = {0};
      ForwardResult result;
      bundle.target->forward(batch, {&cache}, &result);
      const double t2 = now_ms();
      load_ms.push_back(t1 - t0);
      token_ms.push_back(t2 - t1);
      ready_ms.push_back(t2 - t0);
      format = bundle.target->weight_format();
    }
    const double ready = median(ready_ms);
    std::printf("%-40s %10.1f %-12s %10.0f %10.1f %10.0f %10.2f   (best ready %.0f ms)\n",
                fs::path(path).filename().string().c_str(), double(bytes) / 1e6, format.c_str(), median(load_ms),
                median(token_ms), ready, double(bytes) / 1e6 / ready,
                *std::min_element(ready_ms.begin(), ready_ms.end()));
    out.push_back({{"model", path},
                   {"file_bytes", bytes},
                   {"weights", format},
                   {"load_ms", load_ms},
                   {"first_token_ms", token_ms},
                   {"ready_ms", ready_ms},
                   {"ready_ms_median", ready}});
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << nlohmann::json{{"cpu", cpu_model_name()}, {"threads", num_threads()}, {"results", out}}.dump(2)
                             << "\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}

}  // namespace ts::bench
