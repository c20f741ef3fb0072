// CPU features found at run time, and the thread count shared by our kernels and oneDNN (both use OpenMP).
#pragma once

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

}  // namespace ts
