// The avx512 K-quant GEMM: qgemm_k_avx512-inl.h compiled with and without AVX512-VNNI (the activations come from
// qgemm_avx512.cc's quantize_blocks, shared with Q8_0 / Q4_0).
#include <immintrin.h>

#include "kernels/cpu/qgemm_k.h"

// GCC 12's _mm512_cvt* intrinsics trip a false (maybe-)uninitialized warning in its headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_Q_NS avx512k_plain
#define TS_Q_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define TS_Q_VNNI 0
#include "kernels/cpu/qgemm_k_avx512-inl.h"
#undef TS_Q_NS
#undef TS_Q_TARGET
#undef TS_Q_VNNI

#define TS_Q_NS avx512k_vnni
#define TS_Q_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni")))
#define TS_Q_VNNI 1
#include "kernels/cpu/qgemm_k_avx512-inl.h"
