// The weight packers (bf16 / f32 column groups, Q8_0 / Q4_0 and K-quant groups) split big matrices over the
// kernels' threads at load, each range zeroing its own groups: the packed bytes must not depend on the threads.
// The shapes are above the packers' 2^22-value threshold and end in a partial group, so the parallel path and its
// padding rows both run.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernel_test_util.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/quant.h"

namespace ts::kernels::cpu {
namespace {

using testing::random_normal;

constexpr int kOut = 2049, kIn = 2048;  // 4.2e6 values; 2049 rows: the last group holds one row

// pack(threads) run with 1 and with 2 threads into buffers pre-filled with different garbage: equal bytes.
template <typename Pack>
void expect_same_on_threads(size_t bytes, const Pack& pack) {
  const int saved = num_threads();
  std::vector<uint8_t> one(bytes, 0xA5), two(bytes, 0x5A);
  set_num_threads(1);
  pack(one.data());
  set_num_threads(2);
  pack(two.data());
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), bytes), 0);
}

TEST(PackThreads, Bf16AndF32) {
  const std::vector<float> w = random_normal(size_t(kOut) * kIn, 1.0f, 3);  // [out, in]
  std::vector<uint16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = f32_to_bf16(w[i]);
  expect_same_on_threads(packed_elems_bf16(kOut, kIn) * 2, [&](uint8_t* dst) {
    pack_bf16(w16.data(), kOut, kIn, reinterpret_cast<uint16_t*>(dst));
  });
  expect_same_on_threads(packed_elems_f32(kOut, kIn) * 4, [&](uint8_t* dst) {
    pack_f32(w.data(), kOut, kIn, reinterpret_cast<float*>(dst));
  });
}

TEST(PackThreads, QuantizedGroups) {
  const std::vector<float> w = random_normal(size_t(kOut) * kIn, 0.05f, 4);  // [out, in]
  for (QuantType t : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q6_K}) {
    if (!qgemm_supports(t)) continue;
    const size_t rb = row_bytes(t, kIn);
    std::vector<uint8_t> blocks(rb * kOut);  // [out][in / block] GGUF blocks
    for (int o = 0; o < kOut; ++o) ref::quantize_row(t, w.data() + size_t(o) * kIn, blocks.data() + rb * o, kIn);
    SCOPED_TRACE(quant_type_name(t));
    expect_same_on_threads(qgemm_packed_bytes(t, kOut, kIn),
                           [&](uint8_t* dst) { qgemm_pack(t, blocks.data(), kOut, kIn, dst); });
  }
}

}  // namespace
}  // namespace ts::kernels::cpu
