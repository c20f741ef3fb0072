#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace ts {

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // Slightly above halfway rounds up.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12))), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTrip) {
  for (float v : {0.0f, 1.0f, -1.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(DType, Names) {
  DType t;
  ASSERT_TRUE(dtype_from_name("BF16", &t));
  EXPECT_EQ(t, DType::BF16);
  EXPECT_EQ(dtype_size(t), 2u);
  EXPECT_FALSE(dtype_from_name("F8_E4M3", &t));
}

TEST(Error, MessageCarriesLocation) {
  try {
    TS_FAIL("expected ", 3, " got ", 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 3 got 4"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(".cc:"), std::string::npos);
  }
}

}  // namespace ts
