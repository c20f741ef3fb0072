// softmax_f64-inl.h compiled for avx512 (used by the avx512, avx512bf16 and amx variants).
#define TS_F64_NS avx512
#define TS_F64_TARGET __attribute__((target("avx512f")))
#include "kernels/cpu/softmax_f64-inl.h"
