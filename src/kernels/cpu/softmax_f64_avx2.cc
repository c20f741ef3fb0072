// softmax_f64-inl.h compiled for avx2 (no FMA wanted: the passes never contract).
#define TS_F64_NS avx2
#define TS_F64_TARGET __attribute__((target("avx2")))
#include "kernels/cpu/softmax_f64-inl.h"
