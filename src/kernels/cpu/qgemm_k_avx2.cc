// The avx2 K-quant GEMM: qgemm_k_avx2-inl.h compiled with and without AVX-VNNI (the activations come from
// qgemm_avx2.cc's quantize_blocks, shared with Q8_0 / Q4_0).
#include <immintrin.h>

#include "kernels/cpu/qgemm_k.h"

#define TS_Q_NS avx2k_plain
#define TS_Q_TARGET __attribute__((target("avx2,fma,f16c")))
#define TS_Q_VNNI 0
#include "kernels/cpu/qgemm_k_avx2-inl.h"
#undef TS_Q_NS
#undef TS_Q_TARGET
#undef TS_Q_VNNI

#define TS_Q_NS avx2k_vnni
#define TS_Q_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define TS_Q_VNNI 1
#include "kernels/cpu/qgemm_k_avx2-inl.h"
