#include "core/cpu.h"

#include <omp.h>

namespace ts {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
    return f;
  }();
  return features;
}

void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

int default_threads_for(size_t weight_bytes) {
  constexpr size_t kSmallModelBytes = size_t(48) << 20;  // fits in L2+L3-ish territory; per-op overhead dominates
  return weight_bytes < kSmallModelBytes ? 1 : omp_get_num_procs();
}

}  // namespace ts
