// Micro benchmark of Linear: GB/s of weights at M=1 and the cost of M rows relative to M=1, per ISA variant
// (all the CPU supports but scalar, or the comma-separated list in $BENCH_ISAS, e.g. avx2,avx512).
// Weights are cycled over enough layer copies (>= 256 MiB) that every forward streams them from DRAM, as in a
// real model. Prints the minimum and the median over repetitions: the machine is shared and noisy, and the
// minimum is the best estimate of the kernel's own speed. Ratios are of minima.
// With 1 thread the clock is the thread's CPU time, not wall time, so time spent descheduled by other users of
// a busy machine is not counted (memory-bandwidth contention still is).
//   bench_linear [threads] [MiB of weight copies] [which: all | bf16 | f32 | q8_0 | q4_0 | q4_k | q6_k,
//                or several: q8_0,q4_0]
//                [OUTxIN]
// Figures from earlier hosts: docs/benchmarks.md, "Micro benchmark figures kept from source comments".
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/timer.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/weight_memory.h"

using namespace ts;
using namespace ts::kernels;

namespace {

bool g_cpu_clock = false;

double clock_ms() {
  if (!g_cpu_clock) return now_ms();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// format: "bf16", "f32", "q8_0", "q4_0", "q4_k" or "q6_k" (quantized at construction).
void bench_shape(int out, int in, const std::string& format, Isa isa, size_t total_mib) {
  const DType compute = format == "f32" ? DType::F32 : DType::BF16;
  set_isa(isa);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(size_t(out) * in);  // [out, in] bf16
  for (auto& v : w) v = f32_to_bf16(normal(rng));
  std::vector<Linear> layers;
  const auto make = [&] {
    if (format == "q8_0") return Linear(w.data(), DType::BF16, out, in, QuantType::Q8_0);
    if (format == "q4_0") return Linear(w.data(), DType::BF16, out, in, QuantType::Q4_0);
    if (format == "q4_k") return Linear(w.data(), DType::BF16, out, in, QuantType::Q4_K);
    if (format == "q6_k") return Linear(w.data(), DType::BF16, out, in, QuantType::Q6_K);
    return Linear(w.data(), DType::BF16, out, in, compute);
  };
  layers.push_back(make());
  const size_t layer_bytes = layers[0].weight_bytes();
  const int copies = int(std::max<size_t>(2, total_mib * 1024 * 1024 / layer_bytes));
  for (int i = 1; i < copies; ++i) layers.push_back(make());

  const int max_rows = 128;
  std::vector<float> x(size_t(max_rows) * in), y(size_t(max_rows) * out);
  for (auto& v : x) v = normal(rng) * 50.0f;
  std::printf("%5dx%-5d %-4s %-20s", out, in, layers[0].format_name(), layers[0].backend_name());
  double t1 = 0;
  for (int rows : {1, 2, 3, 4, 5, 8, 16, 32, 64, 128}) {
    for (auto& l : layers) l.forward(x.data(), rows, y.data());  // warm-up
    std::vector<double> per_layer_us;
    for (int rep = 0; rep < 9; ++rep) {
      double t0 = clock_ms();
      for (auto& l : layers) l.forward(x.data(), rows, y.data());
      per_layer_us.push_back((clock_ms() - t0) * 1000.0 / copies);
    }
    const double us = *std::min_element(per_layer_us.begin(), per_layer_us.end());
    if (rows == 1) {
      t1 = us;
      const double gb = double(layers[0].weight_bytes()) / 1e3;
      std::printf(" M=1 %6.1f us %5.1f GB/s (median %5.1f) |", us, gb / us, gb / median(per_layer_us));
    } else {
      std::printf(" %d:%.2fx", rows, us / t1);
    }
    std::fflush(stdout);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  size_t mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 512;  // L3 here is 260 MiB
  const std::string which = argc > 3 ? argv[3] : "all";
  set_num_threads(threads);
  g_cpu_clock = threads == 1;
  // As a model of that size would set it ($TREESPARK_WEIGHTS_STREAMED overrules, as for the commands).
  set_weights_streamed_for_model(mib << 20);
  std::printf("threads=%d (%s clock), weights cycled over >= %zu MiB (%s), huge pages %s; M=k: time(M=k)/time(M=1)\n",
              threads, g_cpu_clock ? "thread CPU" : "wall", mib, weights_streamed() ? "streamed" : "cache-resident",
              weight_hugepages_state());
  std::vector<std::pair<int, int>> shapes = {{2048, 2048}, {3072, 1024}, {1024, 3072}};
  if (argc > 4) {
    int out = 0, in = 0;
    if (std::sscanf(argv[4], "%dx%d", &out, &in) != 2 || out <= 0 || in <= 0) {
      std::fprintf(stderr, "expected a shape like 2048x1024, got %s\n", argv[4]);
      return 2;
    }
    shapes = {{out, in}};
  }
  std::vector<Isa> isas;
  if (const char* list = std::getenv("BENCH_ISAS")) {
    std::string names = list;
    for (size_t pos = 0; pos <= names.size();) {
      const size_t comma = std::min(names.find(',', pos), names.size());
      isas.push_back(parse_isa(names.substr(pos, comma - pos)));
      pos = comma + 1;
    }
  } else {
    for (Isa isa : supported_isas())
      if (isa != Isa::Scalar) isas.push_back(isa);
  }
  for (auto [out, in] : shapes) {
    for (const char* format : {"bf16", "f32", "q8_0", "q4_0", "q4_k", "q6_k"}) {
      if (which != "all" && which.find(format) == std::string::npos) continue;
      for (Isa isa : isas) bench_shape(out, in, format, isa, mib);
    }
  }
}
