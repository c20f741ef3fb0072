// ops-inl.h compiled for avx512 (vector layer simd_avx512.h).
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/ops-inl.h"
