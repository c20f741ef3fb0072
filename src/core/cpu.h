// CPU features found at run time, the SIMD variant ("ISA") the kernels run, and the thread count shared by our
// kernels (core/thread_pool.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ts {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;  // vpdpbusd on zmm (the quantized GEMM's avx512 kernel; emulated without it)
  bool avx_vnni = false;     // vpdpbusd on ymm, VEX-encoded (the quantized GEMM's avx2 kernel; emulated without it)
  bool amx_bf16 = false;  // AMX-TILE and AMX-BF16 in CPUID, and Linux granted this process the tile state
  bool amx_int8 = false;  // AMX-TILE and AMX-INT8 in CPUID, and the tile state granted (the quantized GEMM's tiles)
};

const CpuFeatures& cpu_features();

// The kernel variants, in increasing order of what they need from the CPU:
//   scalar      the scalar references (kernels::ref, ref::softmax_f32) and the portable GEMM; runs anywhere
//   avx2        AVX2 + FMA (+ F16C): 8-lane kernels
//   avx512      AVX-512 F/BW/VL + FMA: 16-lane kernels from the same sources
//   avx512bf16  avx512, with the bf16 GEMM and the attention over bf16 K/V on vdpbf16ps (AVX-512-BF16)
//   amx         avx512, with the bf16 GEMM on AMX tiles (tdpbf16ps; Sapphire Rapids and later Xeons) and, where the
//               CPU has AMX-INT8, the quantized GEMM's integer sums of 12+ rows (tdpbssd)
// Every variant is batch-invariant on its own (a row's bits never depend on the batch or the thread count), so
// greedy speculative decoding is exact under each; results differ slightly between variants.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3, Amx = 4 };

const char* isa_name(Isa isa);
// "scalar" | "avx2" | "avx512" | "avx512bf16" | "amx" -> Isa; throws ts::Error for another name.
Isa parse_isa(const std::string& name);
bool isa_supported(Isa isa);          // does this CPU have what the variant needs?
std::vector<Isa> supported_isas();    // every variant this CPU runs, scalar first
// The default variant: amx where the CPU and OS have it, else avx512bf16 where vdpbf16ps out-runs zmm FMAs
// (dpbf16_outruns_fma), else avx512, else avx2, else scalar. Where vdpbf16ps retires fewer multiply-adds than the FMAs,
// avx512's widen-and-FMA GEMM is faster; where it out-runs them, the vdpbf16ps GEMM makes 8-16 rows and prefill cheaper
// than avx512's (docs/results/optimization-notes.md, "Default variant: widen-and-FMA or vdpbf16ps";
// docs/benchmarks.md). amx makes a batch of up to 16 rows cost about what one row does on a DRAM-bound model.
Isa best_isa();
// Whether this CPU's vdpbf16ps (32 bf16 MACs per zmm) retires more multiply-adds per ns than its zmm FMAs (16
// f32 MACs) by a clear margin (1.25x): measured once, in about 0.1 ms, by independent chains of each (the
// best of several tries, so a descheduled try cannot decide). False without AVX-512-BF16.
bool dpbf16_outruns_fma();
// The measurement behind it: multiply-adds per ns of one core's zmm FMAs and vdpbf16ps (zeros without
// AVX-512-BF16).
struct MacRates {
  double fma_per_ns = 0, dpbf16_per_ns = 0;
};
MacRates bf16_dot_probe();
// One core's peak multiply-adds per ns for the bf16 GEMM of `isa`: independent chains of ymm FMAs (avx2), zmm FMAs
// (avx512) or vdpbf16ps (avx512bf16); 0 for scalar and amx (not probed) and where the CPU lacks the variant.
// Measured once per width (best of 7 tries of ~0.1 ms). Benchmarks use it for the compute floor of a k-row call.
double gemm_peak_macs_per_ns(Isa isa);
// One core's peak multiply-adds per ns for the quantized (integer) GEMM of `isa` (kernels/cpu/qgemm.h): independent
// chains of vpdpbusd (64 byte products per zmm, 32 per ymm) where the CPU has VNNI, else of its exact emulation
// (vpmaddubsw + vpmaddwd + vpaddd). avx512, avx512bf16 and amx run the zmm kernel, avx2 the ymm one; 0 for scalar.
// On the CPUs seen, vpdpbusd and f32 FMAs share the same two pipes, so each float op a kernel adds per integer
// block costs a vpdpbusd's slot.
double int8_peak_macs_per_ns(Isa isa);
// One core's multiply-adds per ns through a quantized tile's per-row work for a 32-value block (8 vpdpbusd with
// broadcast activation quads, the float conversion, the scale product and the FMA into the row's accumulator): the
// rate a tile of many rows approaches at best, below int8_peak_macs_per_ns by those extra operations. The zmm VNNI
// kernel's only (avx512, avx512bf16, amx where the CPU has AVX512-VNNI); 0 elsewhere (not probed).
double int8_block_macs_per_ns(Isa isa);
// The variant the kernels run now: set_isa's choice, else $TREESPARK_ISA, else best_isa(). Throws ts::Error
// (naming the variant and the missing CPU features) when $TREESPARK_ISA asks for something this CPU lacks or
// is not a variant's name.
Isa active_isa();
// Switches every kernel to `isa` (process-wide; packed weights need no repacking). Throws ts::Error when the CPU
// lacks it. Not meant to be called while another thread runs kernels.
void set_isa(Isa isa);
// The features `isa` needs that this CPU (or `f`) lacks, e.g. "avx512bw avx512_bf16"; empty when supported.
std::string missing_features(Isa isa);
std::string missing_features(Isa isa, const CpuFeatures& f);
// What $TREESPARK_ISA = `value` selects on a CPU with features `f`: the named variant, or ts::Error naming the
// missing features (or the valid names). active_isa() applies it to this CPU.
Isa isa_from_request(const std::string& value, const CpuFeatures& f);
// The supported variants as one line for logs and errors, e.g. "scalar avx2 avx512 avx512bf16".
std::string isa_summary();

// For benchmark reports: the L3 size in bytes (0 if unknown), and the CPU's model name from /proc/cpuinfo.
size_t l3_cache_bytes();
std::string cpu_model_name();

void set_num_threads(int n);  // the kernels' threads (core/thread_pool.h); n <= 0: leave the default
int num_threads();
// What a command does once its target is loaded: threads (`threads` > 0, else default_threads(): $OMP_NUM_THREADS,
// else every CPU the process may use, whatever the model's size), and, unless
// the variant was chosen ($TREESPARK_ISA or set_isa), avx512 instead of amx for a small model: a one-token step of a
// cache-resident model costs more on AMX tiles (16-row tiles for 1 row, fixed per-call costs), while a DRAM-bound
// model's is the same and its multi-token forwards are much cheaper (docs/architecture.md, "Kernels and weights";
// docs/results/optimization-notes.md, "Small models: avx512 instead of amx").
// It also sets weights_streamed() (set_weights_streamed_for_model).
void configure_for_model(size_t weight_bytes, int threads);

// Whether a model's weight_bytes stream from DRAM on every forward: more than the L3 holds (48 MiB where its size is
// unknown). A cache-resident model's forwards are compute-bound instead.
bool streams_from_dram(size_t weight_bytes);
// The DRAM hint for a model of weight_bytes: `request` "1" or "0" where given (an L3 size the guest misreports can
// be overruled), else streams_from_dram. Throws ts::Error for any other value.
bool streamed_for_model(size_t weight_bytes, const char* request);
// The kernels' hint that the weights they read stream from DRAM (process-wide, false until set): the avx512-vnni
// quantized GEMM then reads two output groups at once in tiles of a few rows, one row included
// (kernels/cpu/qgemm_avx512-inl.h, qgemm_k_avx512-inl.h). Only which instructions run changes, never a result's
// bits. configure_for_model sets it; tests and benchmarks may too.
bool weights_streamed();
void set_weights_streamed(bool streamed);
// set_weights_streamed(streamed_for_model(weight_bytes, $TREESPARK_WEIGHTS_STREAMED)): as a model of that size sets
// it (configure_for_model, the benchmarks).
void set_weights_streamed_for_model(size_t weight_bytes);

}  // namespace ts
