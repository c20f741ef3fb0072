#include "core/cpu.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "core/thread_pool.h"

namespace ts {

namespace {

// Linux >= 5.16 hands the AMX tile data state only to processes that ask (ARCH_REQ_XCOMP_PERM, XTILEDATA).
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
    // GCC 12's __builtin_cpu_supports has no "f16c": CPUID leaf 1, ECX bit 29.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
    f.f16c = (ecx >> 29) & 1;
    // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16, bit 25 AMX-INT8; then Linux must grant the tile state.
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
    const bool amx_tile = (edx >> 24) & 1, amx_bf16 = (edx >> 22) & 1, amx_int8 = (edx >> 25) & 1;
    f.avx512_vnni = f.avx512f && ((ecx >> 11) & 1);  // leaf 7 ECX bit 11
    const unsigned max_leaf7_subleaf = eax;
    if (max_leaf7_subleaf >= 1) {  // leaf 7 sub-leaf 1: EAX bit 4 AVX-VNNI
      __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(1));
      f.avx_vnni = f.avx2 && ((eax >> 4) & 1);
    }
    const bool tiles = amx_tile && (amx_bf16 || amx_int8) && f.avx512f && f.avx512bw && f.avx512vl &&
                       request_amx_permission();
    f.amx_bf16 = tiles && amx_bf16 && f.avx512_bf16;
    f.amx_int8 = tiles && amx_int8 && f.avx512_vnni;
    return f;
  }();
  return features;
}

namespace {

constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx};

// -1 until first use; then the Isa as an int.
std::atomic<int> g_active_isa{-1};
// set_isa() was called: a model-size preference must not override the caller's choice.
std::atomic<bool> g_isa_set{false};
// weights_streamed()
std::atomic<bool> g_weights_streamed{false};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512bf16";
    case Isa::Amx: return "amx";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : kAllIsas)
    if (name == isa_name(isa)) return isa;
  TS_FAIL("unknown ISA variant '", name, "': expected one of scalar, avx2, avx512, avx512bf16, amx");
}

std::string missing_features(Isa isa) { return missing_features(isa, cpu_features()); }

std::string missing_features(Isa isa, const CpuFeatures& f) {
  std::string missing;
  auto need = [&](bool have, const char* name) {
    if (!have) missing += missing.empty() ? name : std::string(" ") + name;
  };
  if (isa >= Isa::Avx2) {
    need(f.avx2, "avx2");
    need(f.fma, "fma");
    need(f.f16c, "f16c");
  }
  if (isa >= Isa::Avx512) {
    need(f.avx512f, "avx512f");
    need(f.avx512bw, "avx512bw");
    need(f.avx512vl, "avx512vl");
  }
  if (isa == Isa::Avx512Bf16 || isa == Isa::Amx) need(f.avx512_bf16, "avx512_bf16");
  if (isa == Isa::Amx) need(f.amx_bf16, "amx_bf16 (with amx_tile and the OS's tile permission)");
  return missing;
}

bool isa_supported(Isa isa) { return missing_features(isa).empty(); }

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas)
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

namespace {

constexpr int kProbeChains = 12;  // >= latency x issue width of either instruction on the CPUs seen
constexpr int kProbeSteps = 512;

// Multiply-adds per ns of kProbeChains independent chains of zmm FMAs (16 MACs per instruction) or, kDot, of
// vdpbf16ps (32: 16 lanes x a pair). kDot only where AVX-512-BF16 is present; the FMA one (no bf16 instruction
// in it) also where only AVX-512F is (gemm_peak_macs_per_ns).
template <bool kDot>
__attribute__((target("avx512f,avx512bf16"))) double macs_per_ns() {
  __m512 acc[kProbeChains];
  for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  const __m512bh a_bh = (__m512bh)_mm512_set1_epi32(0x3f803f80), b_bh = (__m512bh)_mm512_set1_epi32(0x3a833a83);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kProbeSteps; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kProbeChains; ++c)
      acc[c] = kDot ? _mm512_dpbf16_ps(acc[c], a_bh, b_bh) : _mm512_fmadd_ps(acc[c], a, b);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  __m512 sum = acc[0];
  for (int c = 1; c < kProbeChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  volatile float sink = lanes[0];  // keeps the chains
  (void)sink;
  return double(kProbeSteps) * kProbeChains * (kDot ? 32 : 16) / std::max(ns, 1.0);
}

// The same for ymm FMAs (8 MACs per instruction): the avx2 variant's peak.
__attribute__((target("avx2,fma"))) double ymm_fma_macs_per_ns() {
  __m256 acc[kProbeChains];
  for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm256_set1_ps(float(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kProbeSteps; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  __m256 sum = acc[0];
  for (int c = 1; c < kProbeChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  volatile float sink = lanes[0];
  (void)sink;
  return double(kProbeSteps) * kProbeChains * 8 / std::max(ns, 1.0);
}

// The integer GEMM's product: kProbeChains chains of `vpdpbusd` or of its emulation (vpmaddubsw + vpmaddwd +
// vpaddd), on zmm or ymm; one function per form, each compiled for its own features only (a ymm form built with
// AVX-512 enabled could use EVEX encodings an AVX2-only CPU lacks).
#define TS_INT8_PROBE(NAME, TARGET, V, SET1_8, SET1_16, SET1_32, STEP, MACS)                            \
  __attribute__((target(TARGET))) double NAME() {                                                     \
    V acc[kProbeChains];                                                                              \
    for (int c = 0; c < kProbeChains; ++c) acc[c] = SET1_32(c);                                       \
    const V a = SET1_8(3), b = SET1_8(-5), ones = SET1_16(1);                                         \
    (void)ones;                                                                                       \
    const auto t0 = std::chrono::steady_clock::now();                                                 \
    for (int i = 0; i < kProbeSteps; ++i)                                                             \
      _Pragma("GCC unroll 12") for (int c = 0; c < kProbeChains; ++c) acc[c] = STEP;                  \
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count(); \
    int32_t sum = 0, lane;                                                                            \
    for (int c = 0; c < kProbeChains; ++c) {                                                          \
      std::memcpy(&lane, &acc[c], sizeof lane);                                                       \
      sum += lane;                                                                                    \
    }                                                                                                 \
    volatile int32_t sink = sum; /* keeps the chains */                                               \
    (void)sink;                                                                                       \
    return double(kProbeSteps) * kProbeChains * (MACS) / std::max(ns, 1.0);                           \
  }
TS_INT8_PROBE(zmm_vnni_macs_per_ns, "avx512f,avx512bw,avx512vnni", __m512i, _mm512_set1_epi8, _mm512_set1_epi16,
              _mm512_set1_epi32, _mm512_dpbusd_epi32(acc[c], a, b), 64)
TS_INT8_PROBE(zmm_maddubs_macs_per_ns, "avx512f,avx512bw", __m512i, _mm512_set1_epi8, _mm512_set1_epi16,
              _mm512_set1_epi32, _mm512_add_epi32(acc[c], _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), ones)), 64)
TS_INT8_PROBE(ymm_vnni_macs_per_ns, "avx2,avxvnni", __m256i, _mm256_set1_epi8, _mm256_set1_epi16,
              _mm256_set1_epi32, _mm256_dpbusd_avx_epi32(acc[c], a, b), 32)
TS_INT8_PROBE(ymm_maddubs_macs_per_ns, "avx2", __m256i, _mm256_set1_epi8, _mm256_set1_epi16, _mm256_set1_epi32,
              _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones)), 32)
#undef TS_INT8_PROBE

// A quantized tile's per-row work for one 32-value block of a 16-output group (kernels/cpu/qgemm_avx512-inl.h, VNNI):
// 8 vpdpbusd into one sum started from the row's offset correction, each with the row's activation quad as a
// broadcast memory operand; the sum converted to float; the group's 16 block scales times the row's scale; one FMA
// into the row's accumulator. kProbeChains rows, the block's 8 weight vectors and the accumulators in registers as in
// a tile: 512 multiply-adds a row and block. The row data's address passes through an empty asm per block, so the
// compiler cannot hoist its loads out of the loop (as in the tile, every block reads them anew).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double zmm_vnni_block_macs_per_ns() {
  alignas(64) int32_t quads[kProbeChains * 8];  // [row][quad]: 4 activation bytes each
  alignas(64) int32_t offsets[kProbeChains];    // [row]
  alignas(64) float row_scales[kProbeChains];   // [row]
  alignas(64) float group_scales[16];           // [lane]
  for (int c = 0; c < kProbeChains; ++c) {
    for (int j = 0; j < 8; ++j) quads[c * 8 + j] = 0x01020304 + c + j;
    offsets[c] = -8 * c;
    row_scales[c] = 1e-3f * float(c + 1);
  }
  for (int l = 0; l < 16; ++l) group_scales[l] = 1e-4f * float(l + 1);
  __m512i w[8];
  for (int j = 0; j < 8; ++j) w[j] = _mm512_set1_epi8(char(3 + j));
  const __m512 block_scales = _mm512_load_ps(group_scales);
  __m512 acc[kProbeChains];
  for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm512_setzero_ps();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kProbeSteps; ++i) {
    const int32_t* q = quads;
    const int32_t* off = offsets;
    const float* rs = row_scales;
    asm volatile("" : "+r"(q), "+r"(off), "+r"(rs));
#pragma GCC unroll 12
    for (int c = 0; c < kProbeChains; ++c) {
      __m512i sum = _mm512_set1_epi32(off[c]);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(sum) : "v"(w[j]), "m"(q[c * 8 + j]));
      const __m512 scale = _mm512_mul_ps(block_scales, _mm512_set1_ps(rs[c]));
      // (the maskz form, all lanes: GCC 12 warns about the plain intrinsic's undefined pass-through operand here)
      acc[c] = _mm512_fmadd_ps(scale, _mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), sum), acc[c]);
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  __m512 total = acc[0];
  for (int c = 1; c < kProbeChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  volatile float sink = lanes[0];
  (void)sink;
  return double(kProbeSteps) * kProbeChains * 512 / std::max(ns, 1.0);
}

double best_of_7(double (*probe)()) {
  double best = 0;
  for (int t = 0; t < 7; ++t) best = std::max(best, probe());
  return best;
}

}  // namespace

double gemm_peak_macs_per_ns(Isa isa) {
  static const double ymm = [] {
    double best = 0;
    if (isa_supported(Isa::Avx2))
      for (int t = 0; t < 7; ++t) best = std::max(best, ymm_fma_macs_per_ns());
    return best;
  }();
  static const double zmm = [] {
    if (const double probed = bf16_dot_probe().fma_per_ns; probed > 0) return probed;  // measured already there
    double best = 0;
    if (isa_supported(Isa::Avx512))
      for (int t = 0; t < 7; ++t) best = std::max(best, macs_per_ns<false>());
    return best;
  }();
  switch (isa) {
    case Isa::Avx2: return ymm;
    case Isa::Avx512: return zmm;
    case Isa::Avx512Bf16: return bf16_dot_probe().dpbf16_per_ns;
    case Isa::Amx:
    case Isa::Scalar: break;
  }
  return 0;
}

double int8_peak_macs_per_ns(Isa isa) {
  const CpuFeatures& f = cpu_features();
  static const double zmm = !isa_supported(Isa::Avx512) ? 0.0
                            : best_of_7(f.avx512_vnni ? zmm_vnni_macs_per_ns : zmm_maddubs_macs_per_ns);
  static const double ymm = !isa_supported(Isa::Avx2) ? 0.0
                            : best_of_7(f.avx_vnni ? ymm_vnni_macs_per_ns : ymm_maddubs_macs_per_ns);
  switch (isa) {
    case Isa::Avx2: return ymm;
    case Isa::Avx512:
    case Isa::Avx512Bf16:
    case Isa::Amx: return zmm;
    case Isa::Scalar: break;
  }
  return 0;
}

double int8_block_macs_per_ns(Isa isa) {
  static const double zmm =
      isa_supported(Isa::Avx512) && cpu_features().avx512_vnni ? best_of_7(zmm_vnni_block_macs_per_ns) : 0.0;
  return isa == Isa::Avx512 || isa == Isa::Avx512Bf16 || isa == Isa::Amx ? zmm : 0.0;
}

MacRates bf16_dot_probe() {
  static const MacRates rates = [] {
    MacRates r;
    if (!isa_supported(Isa::Avx512Bf16)) return r;
    for (int t = 0; t < 7; ++t) {  // interleaved, best of each: a try cut by the scheduler only lowers one
      r.fma_per_ns = std::max(r.fma_per_ns, macs_per_ns<false>());
      r.dpbf16_per_ns = std::max(r.dpbf16_per_ns, macs_per_ns<true>());
    }
    return r;
  }();
  return rates;
}

bool dpbf16_outruns_fma() {
  const MacRates r = bf16_dot_probe();
  return r.dpbf16_per_ns > 0 && r.dpbf16_per_ns >= 1.25 * r.fma_per_ns;
}

Isa best_isa() {
  const Isa top = supported_isas().back();
  if (top != Isa::Avx512Bf16) return top;  // amx when present
  return dpbf16_outruns_fma() ? Isa::Avx512Bf16 : Isa::Avx512;
}

Isa isa_from_request(const std::string& value, const CpuFeatures& f) {
  Isa wanted = Isa::Scalar;
  try {
    wanted = parse_isa(value);
  } catch (const Error&) {
    TS_FAIL("TREESPARK_ISA=", value, " is not an ISA variant: expected one of scalar, avx2, avx512, avx512bf16, amx");
  }
  const std::string missing = missing_features(wanted, f);
  TS_CHECK(missing.empty(), "TREESPARK_ISA=", value, ": this CPU lacks ", missing, ", which the ", value,
           " kernels need");
  return wanted;
}

void set_isa(Isa isa) {
  const std::string missing = missing_features(isa);
  TS_CHECK(missing.empty(), "ISA variant '", isa_name(isa), "' needs CPU features this CPU lacks: ", missing,
           " (supported here: ", isa_summary(), ")");
  g_active_isa.store(int(isa), std::memory_order_relaxed);
  g_isa_set.store(true, std::memory_order_relaxed);
}

Isa active_isa() {
  const int current = g_active_isa.load(std::memory_order_relaxed);
  if (current >= 0) return Isa(current);
  Isa chosen = best_isa();
  if (const char* env = std::getenv("TREESPARK_ISA"); env != nullptr && *env != '\0')
    chosen = isa_from_request(env, cpu_features());
  int expected = -1;
  g_active_isa.compare_exchange_strong(expected, int(chosen), std::memory_order_relaxed);
  return Isa(g_active_isa.load(std::memory_order_relaxed));
}

std::string isa_summary() {
  std::string s;
  for (Isa isa : supported_isas()) s += s.empty() ? isa_name(isa) : std::string(" ") + isa_name(isa);
  return s;
}

size_t l3_cache_bytes() {
  // sysfs first ("105M" or "32768K"; index3 is the L3 on x86 Linux): the L3 this CPU actually shares. glibc's sysconf
  // can report a far larger L3 than sysfs (and lscpu) in a virtual machine (docs/results/optimization-notes.md,
  // "L3 size: sysfs before sysconf").
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  size_t value = 0;
  char unit = 0;
  if (in >> value) {
    in >> unit;
    return unit == 'M' ? value << 20 : unit == 'K' ? value << 10 : value;
  }
  const long sys = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return sys > 0 ? size_t(sys) : 0;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU", family, model;
  auto value = [&] { return line.substr(line.find(':') + 2); };
  while (std::getline(in, line) && !line.empty()) {  // the first processor's block
    if (line.find(':') == std::string::npos || line.find(':') + 2 > line.size()) continue;
    if (line.rfind("model name", 0) == 0) name = value();
    else if (line.rfind("cpu family", 0) == 0) family = value();
    else if (line.rfind("model\t", 0) == 0) model = value();
  }
  return family.empty() ? name : name + " (family " + family + " model " + model + ")";
}

void set_num_threads(int n) {
  if (n > 0) set_pool_threads(n);
}

int num_threads() { return pool_threads(); }

void configure_for_model(size_t weight_bytes, int threads) {
  // Every model gets the pool when --threads is 0: ops too small to split stay on the caller (gemm_worth_threads
  // and the per-op minimum work in parallel.h), while a quantized 40 MB target decodes ~1.5x faster on 2 threads
  // than on one.
  set_num_threads(threads > 0 ? threads : default_threads());
  const char* env = std::getenv("TREESPARK_ISA");
  const bool chosen = g_isa_set.load(std::memory_order_relaxed) || (env != nullptr && *env != '\0');
  constexpr size_t kSmallModelBytes = size_t(48) << 20;
  if (!chosen && active_isa() == Isa::Amx && weight_bytes < kSmallModelBytes)
    g_active_isa.store(int(Isa::Avx512), std::memory_order_relaxed);
  set_weights_streamed_for_model(weight_bytes);
}

bool streamed_for_model(size_t weight_bytes, const char* request) {
  const std::string value = request != nullptr ? request : "";
  TS_CHECK(value.empty() || value == "0" || value == "1", "TREESPARK_WEIGHTS_STREAMED=", value,
           ": expected 0 (weights cache-resident) or 1 (weights streamed from DRAM); unset, the model's size against "
           "the L3 decides");
  return value.empty() ? streams_from_dram(weight_bytes) : value == "1";
}

bool streams_from_dram(size_t weight_bytes) {
  const size_t l3 = l3_cache_bytes();
  return weight_bytes > (l3 > 0 ? l3 : size_t(48) << 20);
}

bool weights_streamed() { return g_weights_streamed.load(std::memory_order_relaxed); }

void set_weights_streamed(bool streamed) { g_weights_streamed.store(streamed, std::memory_order_relaxed); }

void set_weights_streamed_for_model(size_t weight_bytes) {
  set_weights_streamed(streamed_for_model(weight_bytes, std::getenv("TREESPARK_WEIGHTS_STREAMED")));
}

}  // namespace ts
