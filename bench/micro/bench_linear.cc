// Micro benchmark of Linear: GB/s of weights at M=1 and the cost of M rows relative to M=1, per backend.
// Weights are cycled over enough layer copies (>= 256 MiB) that every forward streams them from DRAM, as in a
// real model. Prints medians; the machine is shared and noisy, so compare ratios.
//   bench_linear [threads] [copies_mib]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/timer.h"
#include "kernels/linear.h"

using namespace ts;
using namespace ts::kernels;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_shape(int out, int in, DType compute, LinearBackend backend, size_t total_mib) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(size_t(out) * in);  // [out, in] bf16
  for (auto& v : w) v = f32_to_bf16(normal(rng));
  const size_t layer_bytes = w.size() * (compute == DType::BF16 ? 2 : 4);
  const int copies = int(std::max<size_t>(2, total_mib * 1024 * 1024 / layer_bytes));
  std::vector<Linear> layers;
  for (int i = 0; i < copies; ++i) layers.emplace_back(w.data(), DType::BF16, out, in, compute, backend);

  const int max_rows = 64;
  std::vector<float> x(size_t(max_rows) * in), y(size_t(max_rows) * out);
  for (auto& v : x) v = normal(rng) * 50.0f;
  std::printf("%5dx%-5d %-4s %-22s", out, in, dtype_name(compute), layers[0].backend_name());
  double t1 = 0;
  for (int rows : {1, 2, 4, 8, 16, 32, 64}) {
    for (auto& l : layers) l.forward(x.data(), rows, y.data());  // warm-up (and oneDNN primitive creation)
    std::vector<double> per_layer_us;
    for (int rep = 0; rep < 5; ++rep) {
      double t0 = now_ms();
      for (auto& l : layers) l.forward(x.data(), rows, y.data());
      per_layer_us.push_back((now_ms() - t0) * 1000.0 / copies);
    }
    double us = median(per_layer_us);
    if (rows == 1) {
      t1 = us;
      std::printf(" M=1 %6.1f us %5.1f GB/s |", us, double(layers[0].weight_bytes()) / us / 1e3);
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
  size_t mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 256;
  set_num_threads(threads);
  std::printf("threads=%d, weights cycled over >= %zu MiB; M=k: time(M=k)/time(M=1)\n", threads, mib);
  for (auto [out, in] : {std::pair{2048, 2048}, std::pair{3072, 1024}, std::pair{1024, 3072}}) {
    for (DType compute : {DType::BF16, DType::F32}) {
      for (LinearBackend b : {LinearBackend::Auto, LinearBackend::OneDnn}) bench_shape(out, in, compute, b, mib);
    }
  }
}
