// CPU features found at run time, and the thread count shared by our kernels and oneDNN (both use OpenMP).
#pragma once

#include <cstddef>

namespace ts {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512_bf16 = false;
};

const CpuFeatures& cpu_features();
void set_num_threads(int n);  // n <= 0: leave OpenMP's default
int num_threads();
// Threads to use when the user did not say: one for small models, whose per-op work (a few microseconds) is
// below the cost of handing work to a second thread; all cores otherwise.
int default_threads_for(size_t weight_bytes);

}  // namespace ts
