// softmax_f64-inl.h for the scalar variant: the base x86-64 build (SSE2), which runs anywhere.
#define TS_F64_NS scalar
#define TS_F64_TARGET
#include "kernels/cpu/softmax_f64-inl.h"
