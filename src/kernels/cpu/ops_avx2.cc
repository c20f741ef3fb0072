// ops-inl.h compiled for avx2 (vector layer simd_avx2.h).
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/ops-inl.h"
