// attention-inl.h compiled for avx512bf16: the avx512 vector layer, and vdpbf16ps for both products over bf16 K/V
// (attention_dot-inl.h). f32 K/V take the same arithmetic as the avx512 build.
#include "core/dtype.h"
#include "kernels/cpu/simd_avx512.h"

#undef TS_SIMD_NS
#define TS_SIMD_NS avx512bf16
#undef TS_SIMD
#define TS_SIMD __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")))
#define TS_ATTENTION_BF16_DOT 1

namespace ts::kernels::cpu::avx512bf16 {
using namespace ts::kernels::cpu::avx512;  // the vector layer
}  // namespace ts::kernels::cpu::avx512bf16

#include "kernels/cpu/attention-inl.h"
