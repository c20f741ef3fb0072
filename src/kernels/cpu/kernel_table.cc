// The per-variant kernel tables (kernel_table.h), filled once per process: the only place that names a variant's
// kernels. avx512bf16 and amx are avx512 with another bf16 GEMM (the ops have no bf16-specific kernel), and the
// vector variants run the VNNI quantized GEMM where the CPU has VNNI (the same bits either way).
#include "kernels/cpu/kernel_table.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/qgemm_k.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/ops.h"
#include "kernels/quant_k.h"

namespace ts::kernels::cpu {

void check_softmax_max(float max_z, int n) {
  TS_CHECK(std::isfinite(max_z), "softmax: expected finite logits with at least one > -inf among ", n,
           ", max (or NaN) is ", max_z);
}

namespace {

using GemmRoundedFn = void (*)(const float* x_rounded, const uint16_t* packed, float* y, int rows, int out_features,
                               int in_features);
using GemmBitsFn = void (*)(const uint16_t* x_bits, const uint16_t* packed, float* y, int rows, int out_features,
                            int in_features);
using RoundFn = void (*)(const float* src, float* dst, int64_t n);

// The bf16 product of the widen-and-FMA GEMMs (scalar, avx2, avx512): activations rounded to bf16 values, as f32,
// [rows, k_padded], zero in the padding column (the packed GEMM reads k in pairs). One buffer per thread.
template <RoundFn kRound, GemmRoundedFn kGemm>
void linear_bf16_rounded(const float* x, const uint16_t* packed, float* y, int rows, int out_features,
                         int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
  thread_local std::vector<float> x_rounded;  // [rows, k_padded]
  x_rounded.resize(size_t(rows) * kp);
  for (int r = 0; r < rows; ++r) {
    kRound(x + size_t(r) * in_features, x_rounded.data() + size_t(r) * kp, in_features);
    if (kp != in_features) x_rounded[size_t(r) * kp + in_features] = 0.0f;
  }
  kGemm(x_rounded.data(), packed, y, rows, out_features, in_features);
}

// The bf16 product of the bf16-operand GEMMs (vdpbf16ps, AMX tiles): activations converted to bf16 bits.
template <GemmBitsFn kGemm>
void linear_bf16_bits(const float* x, const uint16_t* packed, float* y, int rows, int out_features,
                      int in_features) {
  const int kp = gemm_k_padded_bf16(in_features);
  thread_local std::vector<uint32_t> x_pairs;  // [rows, k_padded / 2] bf16 pairs (uint32 for alignment)
  x_pairs.resize(size_t(rows) * kp / 2);
  uint16_t* x_bits = reinterpret_cast<uint16_t*>(x_pairs.data());  // [rows, k_padded]
  avx512bf16::convert_rows_to_bf16(x, rows, in_features, x_bits);
  kGemm(x_bits, packed, y, rows, out_features, in_features);
}

// The vector variants' draft softmax: the max pass reads the input only, so bad input throws before anything is
// written; then the exp pass.
template <float (*kMax)(const float*, int, float), void (*kExp)(const float*, int, float, float, float*)>
void softmax_scaled_vector(const float* logits, int n, float scale, float* out) {
  const float max_z = kMax(logits, n, scale);
  TS_CHECK(!std::isnan(max_z), "softmax: NaN logit");
  check_softmax_max(max_z, n);
  kExp(logits, n, scale, max_z, out);
}

KernelTable scalar_entries(const QgemmTable* qgemm) {
  KernelTable t;
  t.isa = Isa::Scalar;
  t.lanes = 1;
  t.add = ref::add;
  t.rmsnorm = ref::rmsnorm;
  t.rope = ref::rope;
  t.swiglu = ref::swiglu;
  t.swiglu_rows = scalar::swiglu_rows;
  t.softmax = ref::softmax;
  t.attention = scalar::attention;
  t.attention_bf16kv = scalar::attention;
  t.attention_paged = scalar::attention_paged;
  t.attention_paged_bf16kv = scalar::attention_paged;
  t.attention_tiled = scalar::attention_tiled;
  t.attention_tiled_bf16kv = scalar::attention_tiled_bf16kv;
  t.widen_row = scalar::widen_row;
  t.scaled_max = scalar::scaled_max;
  t.exp_normalize = scalar::exp_normalize;
  t.softmax_scaled = ref::softmax_scaled;
  t.round_to_bf16 = scalar::round_to_bf16;
  t.to_bf16_bits = scalar::to_bf16_bits;
  t.quantize_q4_k = [](const float* x, void* blocks, int64_t nb) {
    ref::quantize_q4_k(x, static_cast<BlockQ4_K*>(blocks), nb);
  };
  t.quantize_q6_k = [](const float* x, void* blocks, int64_t nb) {
    ref::quantize_q6_k(x, static_cast<BlockQ6_K*>(blocks), nb);
  };
  t.linear_f32 = gemm_f32_scalar;
  t.linear_bf16 = linear_bf16_rounded<scalar::round_to_bf16, gemm_bf16_scalar>;
  t.linear_f32_backend = "portable-f32";
  t.linear_bf16_backend = "portable-bf16";
  t.qgemm = qgemm;
  t.exp_nonpositive_f64 = scalar::exp_nonpositive_f64;
  t.sum_f64 = scalar::sum_f64;
  t.divide_f64 = scalar::divide_f64;
  t.scale_to_f64_and_max = scalar::scale_to_f64_and_max;
  return t;
}

// avx2 and avx512 compile the same sources (ops-inl.h, attention-inl.h, gemm-inl.h, softmax_f64-inl.h) per width.
KernelTable avx2_entries(const QgemmTable* qgemm) {
  KernelTable t;
  t.isa = Isa::Avx2;
  t.lanes = 8;
  t.add = avx2::add;
  t.rmsnorm = avx2::rmsnorm;
  t.rope = avx2::rope;
  t.swiglu = avx2::swiglu;
  t.swiglu_rows = avx2::swiglu_rows;
  t.softmax = avx2::softmax;
  t.attention = avx2::attention;
  t.attention_bf16kv = avx2::attention;
  t.attention_paged = avx2::attention_paged;
  t.attention_paged_bf16kv = avx2::attention_paged;
  t.attention_tiled = avx2::attention_tiled;
  t.attention_tiled_bf16kv = avx2::attention_tiled_bf16kv;
  t.widen_row = avx2::widen_row;
  t.scaled_max = avx2::scaled_max;
  t.exp_normalize = avx2::exp_normalize;
  t.softmax_scaled = softmax_scaled_vector<avx2::scaled_max, avx2::exp_normalize>;
  t.round_to_bf16 = avx2::round_to_bf16;
  t.to_bf16_bits = avx2::to_bf16_bits;
  t.quantize_q4_k = avx2::quantize_q4_k;
  t.quantize_q6_k = avx2::quantize_q6_k;
  t.linear_f32 = avx2::gemm_f32;
  t.linear_bf16 = linear_bf16_rounded<avx2::round_to_bf16, avx2::gemm_bf16>;
  t.exp_nonpositive_f64 = avx2::exp_nonpositive_f64;
  t.sum_f64 = avx2::sum_f64;
  t.divide_f64 = avx2::divide_f64;
  t.scale_to_f64_and_max = avx2::scale_to_f64_and_max;
  t.linear_f32_backend = "packed-avx2-f32";
  t.linear_bf16_backend = "packed-avx2-bf16";
  t.qgemm = qgemm;
  return t;
}

KernelTable avx512_entries(Isa isa, const QgemmTable* qgemm) {
  KernelTable t;
  t.isa = isa;
  t.lanes = 16;
  t.add = avx512::add;
  t.rmsnorm = avx512::rmsnorm;
  t.rope = avx512::rope;
  t.swiglu = avx512::swiglu;
  t.swiglu_rows = avx512::swiglu_rows;
  t.softmax = avx512::softmax;
  t.attention = avx512::attention;
  t.attention_bf16kv = avx512::attention;
  t.attention_paged = avx512::attention_paged;
  t.attention_paged_bf16kv = avx512::attention_paged;
  t.attention_tiled = avx512::attention_tiled;
  t.attention_tiled_bf16kv = avx512::attention_tiled_bf16kv;
  t.widen_row = avx512::widen_row;
  t.scaled_max = avx512::scaled_max;
  t.exp_normalize = avx512::exp_normalize;
  t.softmax_scaled = softmax_scaled_vector<avx512::scaled_max, avx512::exp_normalize>;
  t.round_to_bf16 = avx512::round_to_bf16;
  t.to_bf16_bits = avx512::to_bf16_bits;
  t.quantize_q4_k = avx512::quantize_q4_k;
  t.quantize_q6_k = avx512::quantize_q6_k;
  t.linear_f32 = avx512::gemm_f32;
  t.linear_bf16 = linear_bf16_rounded<avx512::round_to_bf16, avx512::gemm_bf16>;
  t.exp_nonpositive_f64 = avx512::exp_nonpositive_f64;
  t.sum_f64 = avx512::sum_f64;
  t.divide_f64 = avx512::divide_f64;
  t.scale_to_f64_and_max = avx512::scale_to_f64_and_max;
  t.linear_f32_backend = "packed-avx512-f32";
  t.linear_bf16_backend = "packed-avx512-bf16";
  t.qgemm = qgemm;
  if (isa == Isa::Avx512Bf16) {
    t.linear_bf16 = linear_bf16_bits<avx512bf16::gemm_bf16>;
    t.linear_bf16_backend = "packed-avx512bf16-dpbf16";
  } else if (isa == Isa::Amx) {
    t.linear_bf16 = linear_bf16_bits<amx::gemm_bf16>;
    t.linear_bf16_backend = "packed-amx-tdpbf16";
  }
  // vdpbf16ps for attention over bf16 K/V on avx512bf16 only: on the AMX Xeons measured vdpbf16ps retires at half
  // the zmm FMA rate or less, and the FMA attention over widened bf16 was 1.3x faster at 8-16 query rows and the
  // same at one (docs/results/optimization-notes.md, "Attention on amx: FMAs, not vdpbf16ps").
  if (isa == Isa::Avx512Bf16) {
    t.attention = avx512bf16::attention;
    t.attention_bf16kv = avx512bf16::attention;
    t.attention_paged = avx512bf16::attention_paged;
    t.attention_paged_bf16kv = avx512bf16::attention_paged;
    t.attention_tiled = avx512bf16::attention_tiled;
    t.attention_tiled_bf16kv = avx512bf16::attention_tiled_bf16kv;
  }
  return t;
}

constexpr int kIsas = 5;    // Isa::Scalar .. Isa::Amx
constexpr int kQgemms = 6;  // QgemmKernel::Scalar .. QgemmKernel::Amx

// Filled in place (the ISA tables point into the quantized ones), once, on first use.
struct Tables {
  QgemmTable qgemm[kQgemms];
  KernelTable isa[kIsas];

  Tables() {
    const CpuFeatures& f = cpu_features();
    const bool avx2 = isa_supported(Isa::Avx2) && f.f16c, avx512 = isa_supported(Isa::Avx512) && f.f16c;
    using K = QgemmKernel;
    qgemm[int(K::Scalar)] = {K::Scalar, "scalar", "qgemm-scalar", true, quantize_blocks_scalar, qgemm_groups_scalar,
                             qgemm_groups_k_scalar};
    qgemm[int(K::Avx2)] = {K::Avx2, "avx2", "qgemm-avx2", avx2, avx2::quantize_blocks, avx2_plain::run_groups,
                           avx2k_plain::run_groups_k};
    qgemm[int(K::Avx2Vnni)] = {K::Avx2Vnni, "avx2-vnni", "qgemm-avx2-vnni", avx2 && f.avx_vnni, avx2::quantize_blocks,
                               avx2_vnni::run_groups, avx2k_vnni::run_groups_k};
    qgemm[int(K::Avx512)] = {K::Avx512, "avx512", "qgemm-avx512", avx512, avx512::quantize_blocks,
                             avx512_plain::run_groups, avx512k_plain::run_groups_k};
    qgemm[int(K::Avx512Vnni)] = {K::Avx512Vnni, "avx512-vnni", "qgemm-avx512-vnni", avx512 && f.avx512_vnni,
                                 avx512::quantize_blocks, avx512_vnni::run_groups, avx512k_vnni::run_groups_k};
    qgemm[int(K::Amx)] = {K::Amx, "amx-int8", "qgemm-amx-int8", avx512 && f.avx512_vnni && f.amx_int8,
                          avx512::quantize_blocks, amx_int8::run_groups, amx_int8::run_groups_k};
    // TREESPARK_VNNI=0: the VNNI-free copies (their exact emulation, the same bits) even where the CPU has VNNI, so
    // the path an AVX2-only CPU such as Zen 3 runs can be timed and exercised anywhere.
    const char* vnni_value = std::getenv("TREESPARK_VNNI");
    const std::string vnni_env = vnni_value != nullptr ? vnni_value : "";
    TS_CHECK(vnni_env.empty() || vnni_env == "0" || vnni_env == "1", "TREESPARK_VNNI=", vnni_env,
             ": expected 0 (the quantized GEMM's VNNI-free copies) or 1 (VNNI where the CPU has it, the default)");
    const bool vnni = vnni_env != "0";
    auto best = [&](QgemmKernel with_vnni, QgemmKernel plain) {
      return vnni && qgemm[int(with_vnni)].supported ? &qgemm[int(with_vnni)] : &qgemm[int(plain)];
    };
    const QgemmTable* q2 = best(QgemmKernel::Avx2Vnni, QgemmKernel::Avx2);
    const QgemmTable* q512 = best(QgemmKernel::Avx512Vnni, QgemmKernel::Avx512);
    isa[int(Isa::Scalar)] = scalar_entries(&qgemm[int(QgemmKernel::Scalar)]);
    isa[int(Isa::Avx2)] = avx2_entries(q2);
    for (Isa wide : {Isa::Avx512, Isa::Avx512Bf16}) isa[int(wide)] = avx512_entries(wide, q512);
    const QgemmTable* q_amx = vnni && qgemm[int(K::Amx)].supported ? &qgemm[int(K::Amx)] : q512;  // its tail rows: vnni
    isa[int(Isa::Amx)] = avx512_entries(Isa::Amx, q_amx);
  }
};

const Tables& tables() {
  static const Tables filled;
  return filled;
}

}  // namespace

const KernelTable& kernel_table(Isa isa) {
  const std::string missing = missing_features(isa);
  TS_CHECK(missing.empty(), "kernel table of '", isa_name(isa), "': this CPU lacks ", missing);
  return tables().isa[int(isa)];
}

const KernelTable& active_kernels() { return tables().isa[int(active_isa())]; }

const QgemmTable& qgemm_table(QgemmKernel k) { return tables().qgemm[int(k)]; }

// The lists below name every pointer of the structs; the sizes keep them from falling behind a new entry.
static_assert(sizeof(KernelTable) == 30 * sizeof(void*), "a new KernelTable entry needs a line in null_entries");
static_assert(sizeof(QgemmTable) == 7 * sizeof(void*), "a new QgemmTable entry needs a line in null_entries");

#define TS_NULL_ENTRY(field) \
  if (t.field == nullptr) missing.push_back(#field)

std::vector<std::string> null_entries(const KernelTable& t) {
  std::vector<std::string> missing;
  TS_NULL_ENTRY(add);
  TS_NULL_ENTRY(rmsnorm);
  TS_NULL_ENTRY(rope);
  TS_NULL_ENTRY(swiglu);
  TS_NULL_ENTRY(swiglu_rows);
  TS_NULL_ENTRY(softmax);
  TS_NULL_ENTRY(attention);
  TS_NULL_ENTRY(attention_bf16kv);
  TS_NULL_ENTRY(attention_paged);
  TS_NULL_ENTRY(attention_paged_bf16kv);
  TS_NULL_ENTRY(attention_tiled);
  TS_NULL_ENTRY(attention_tiled_bf16kv);
  TS_NULL_ENTRY(widen_row);
  TS_NULL_ENTRY(scaled_max);
  TS_NULL_ENTRY(exp_normalize);
  TS_NULL_ENTRY(softmax_scaled);
  TS_NULL_ENTRY(round_to_bf16);
  TS_NULL_ENTRY(to_bf16_bits);
  TS_NULL_ENTRY(quantize_q4_k);
  TS_NULL_ENTRY(quantize_q6_k);
  TS_NULL_ENTRY(linear_f32);
  TS_NULL_ENTRY(linear_bf16);
  TS_NULL_ENTRY(linear_f32_backend);
  TS_NULL_ENTRY(linear_bf16_backend);
  TS_NULL_ENTRY(qgemm);
  TS_NULL_ENTRY(exp_nonpositive_f64);
  TS_NULL_ENTRY(sum_f64);
  TS_NULL_ENTRY(divide_f64);
  TS_NULL_ENTRY(scale_to_f64_and_max);
  return missing;
}

std::vector<std::string> null_entries(const QgemmTable& t) {
  std::vector<std::string> missing;
  TS_NULL_ENTRY(name);
  TS_NULL_ENTRY(backend);
  TS_NULL_ENTRY(quantize_blocks);
  TS_NULL_ENTRY(groups);
  TS_NULL_ENTRY(groups_k);
  return missing;
}

#undef TS_NULL_ENTRY

}  // namespace ts::kernels::cpu
