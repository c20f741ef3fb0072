// The ISA override: names, refusal of variants a CPU lacks (with fabricated CPUs, so it is tested on every
// machine), that set_isa switches what the kernels run, and the DRAM hint configure_for_model sets.
#include <gtest/gtest.h>

#include <cstdio>

#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/linear.h"
#include "kernels/ops.h"

namespace ts {
namespace {

CpuFeatures zen3() {  // AVX2 + FMA + F16C, no AVX-512
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}

CpuFeatures zen4() {  // AVX-512 with BF16
  CpuFeatures f = zen3();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512_bf16 = true;
  return f;
}

std::string error_of(const std::string& request, const CpuFeatures& f) {
  try {
    isa_from_request(request, f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_THROW(parse_isa("avx"), Error);
  EXPECT_THROW(parse_isa("AVX2"), Error);
}

TEST(Isa, RequestForAVariantTheCpuLacksIsRefusedByName) {
  EXPECT_EQ(isa_from_request("avx2", zen3()), Isa::Avx2);
  EXPECT_EQ(isa_from_request("scalar", zen3()), Isa::Scalar);
  const std::string err = error_of("avx512", zen3());
  EXPECT_NE(err.find("TREESPARK_ISA=avx512"), std::string::npos) << err;
  EXPECT_NE(err.find("avx512f"), std::string::npos) << err;
  EXPECT_NE(error_of("avx512bf16", zen3()).find("avx512_bf16"), std::string::npos);
  EXPECT_EQ(isa_from_request("avx512bf16", zen4()), Isa::Avx512Bf16);
  CpuFeatures no_bf16 = zen4();
  no_bf16.avx512_bf16 = false;
  EXPECT_EQ(error_of("avx512bf16", no_bf16).find("avx512f"), std::string::npos);  // names only what is missing
  EXPECT_NE(error_of("avx512bf16", no_bf16).find("avx512_bf16"), std::string::npos);
  EXPECT_NE(error_of("sse9", zen4()).find("expected one of scalar, avx2, avx512, avx512bf16, amx"), std::string::npos);
  EXPECT_NE(error_of("amx", zen4()).find("amx_bf16"), std::string::npos);  // Zen 4 has AVX-512-BF16, no AMX
  EXPECT_EQ(error_of("amx", zen4()).find("avx512_bf16"), std::string::npos);
  CpuFeatures sapphire_rapids = zen4();
  sapphire_rapids.amx_bf16 = true;
  EXPECT_EQ(isa_from_request("amx", sapphire_rapids), Isa::Amx);
  EXPECT_NE(error_of("avx2", CpuFeatures{}).find("avx2 fma f16c"), std::string::npos);
  EXPECT_TRUE(missing_features(Isa::Scalar, CpuFeatures{}).empty());
}

TEST(Isa, SupportedListIsOrderedAndSetIsaSwitchesTheKernels) {
  const std::vector<Isa> isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::Scalar);
  for (size_t i = 1; i < isas.size(); ++i) EXPECT_LT(int(isas[i - 1]), int(isas[i]));
  // avx512bf16 only where its vdpbf16ps out-runs the FMAs (measured), else avx512.
  const Isa want = isas.back() != Isa::Avx512Bf16 ? isas.back() : dpbf16_outruns_fma() ? Isa::Avx512Bf16 : Isa::Avx512;
  EXPECT_EQ(best_isa(), want);
  EXPECT_EQ(dpbf16_outruns_fma(), dpbf16_outruns_fma()) << "measured once, then fixed";
  if (!isa_supported(Isa::Avx512Bf16)) {
    EXPECT_FALSE(dpbf16_outruns_fma());
  }
  const MacRates rates = bf16_dot_probe();
  std::printf("[isa] best variant here: %s (MACs per ns: zmm FMA %.1f, vdpbf16ps %.1f)\n", isa_name(best_isa()),
              rates.fma_per_ns, rates.dpbf16_per_ns);
  // The compute-floor peaks bench forward prints: probed for each SIMD width the CPU has, nothing otherwise.
  EXPECT_EQ(gemm_peak_macs_per_ns(Isa::Scalar), 0.0);
  EXPECT_EQ(gemm_peak_macs_per_ns(Isa::Amx), 0.0);
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    const double peak = gemm_peak_macs_per_ns(isa);
    std::printf("[isa] %s GEMM peak %.1f MACs/ns per core\n", isa_name(isa), peak);
    if (isa_supported(isa)) {
      EXPECT_GT(peak, 1.0) << isa_name(isa);  // 8 MACs per cycle at 0.125 GHz would be a broken probe
    } else {
      EXPECT_EQ(peak, 0.0) << isa_name(isa);
    }
  }
  // The integer GEMM's peak: zmm for every AVX-512 variant (amx included: its quantized GEMM is the zmm one).
  EXPECT_EQ(int8_peak_macs_per_ns(Isa::Scalar), 0.0);
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx}) {
    const double peak = int8_peak_macs_per_ns(isa);
    std::printf("[isa] %s integer-dot peak %.1f MACs/ns per core\n", isa_name(isa), peak);
    if (isa_supported(isa == Isa::Avx2 ? Isa::Avx2 : Isa::Avx512)) {
      EXPECT_GT(peak, 1.0) << isa_name(isa);
    } else {
      EXPECT_EQ(peak, 0.0) << isa_name(isa);
    }
  }
  if (isa_supported(Isa::Avx512)) {
    EXPECT_EQ(int8_peak_macs_per_ns(Isa::Amx), int8_peak_macs_per_ns(Isa::Avx512));
  }
  // The tile's block work: probed for the zmm VNNI kernel only, and slower than its products alone (it adds work to
  // them; the 1.25 leaves room for two noisy probes, not for a rate counted twice).
  EXPECT_EQ(int8_block_macs_per_ns(Isa::Scalar), 0.0);
  EXPECT_EQ(int8_block_macs_per_ns(Isa::Avx2), 0.0);
  const double block = int8_block_macs_per_ns(Isa::Avx512);
  std::printf("[isa] avx512 integer block work %.1f MACs/ns per core\n", block);
  if (isa_supported(Isa::Avx512) && cpu_features().avx512_vnni) {
    EXPECT_GT(block, 1.0);
    EXPECT_LT(block, 1.25 * int8_peak_macs_per_ns(Isa::Avx512));
    EXPECT_EQ(int8_block_macs_per_ns(Isa::Avx512Bf16), block);
  } else {
    EXPECT_EQ(block, 0.0);
  }
  const Isa saved = active_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx}) {
    if (!isa_supported(isa)) {
      EXPECT_THROW(set_isa(isa), Error) << isa_name(isa);
      continue;
    }
    set_isa(isa);
    EXPECT_EQ(active_isa(), isa);
    EXPECT_STREQ(kernels::ops_isa(), isa_name(isa));
    std::vector<float> w(64 * 32, 0.5f);
    const std::string backend = kernels::Linear(w.data(), DType::F32, 64, 32, DType::BF16).backend_name();
    EXPECT_NE(backend.find(isa == Isa::Scalar ? "portable" : isa_name(isa)), std::string::npos) << backend;
  }
  set_isa(saved);
  std::printf("this CPU: %s; active: %s\n", isa_summary().c_str(), isa_name(active_isa()));
}

// The DRAM hint: a model larger than the L3 streams its weights (48 MiB where the L3 size is unknown), and
// configure_for_model sets the kernels' hint from the model's size.
TEST(Isa, ConfigureForModelSetsTheDramHintFromTheModelSize) {
  const size_t l3 = l3_cache_bytes(), bound = l3 > 0 ? l3 : size_t(48) << 20;
  EXPECT_FALSE(streams_from_dram(bound));
  EXPECT_TRUE(streams_from_dram(bound + 1));
  EXPECT_FALSE(streams_from_dram(size_t(1) << 20));
  const bool saved = weights_streamed();
  const int threads = num_threads();
  configure_for_model(bound + 1, threads);
  EXPECT_TRUE(weights_streamed());
  configure_for_model(size_t(1) << 20, threads);
  EXPECT_FALSE(weights_streamed());
  set_weights_streamed(true);
  EXPECT_TRUE(weights_streamed());
  set_weights_streamed(saved);
  // $TREESPARK_WEIGHTS_STREAMED overrules the size; anything but 0 or 1 is refused by name.
  EXPECT_TRUE(streamed_for_model(size_t(1) << 20, "1"));
  EXPECT_FALSE(streamed_for_model(bound + 1, "0"));
  EXPECT_TRUE(streamed_for_model(bound + 1, ""));
  EXPECT_FALSE(streamed_for_model(size_t(1) << 20, nullptr));
  try {
    streamed_for_model(1, "yes");
    ADD_FAILURE() << "TREESPARK_WEIGHTS_STREAMED=yes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TREESPARK_WEIGHTS_STREAMED=yes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ts
