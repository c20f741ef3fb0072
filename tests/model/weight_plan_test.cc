// The --quantize schemes' per-matrix formats (model/weight_plan.h), q4_k_m against llama.cpp's Q4_K_M rule.
#include "model/weight_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"
#include "model/target_model.h"

namespace ts {
namespace {

using kernels::QuantType;

TEST(WeightPlan, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(parse_weight_scheme("Q4_K_M"), WeightScheme::Q4_K_M);
  EXPECT_EQ(parse_weight_scheme("bf16"), WeightScheme::Native);
  try {
    parse_weight_scheme("q5_k_s");
    FAIL() << "q5_k_s accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown weight format 'q5_k_s'"), std::string::npos);
  }
}

TEST(WeightPlan, Q8AndQ4) {
  WeightPlan p{DType::BF16, WeightScheme::Q4_0, 3, 20};
  EXPECT_EQ(p.quant_for(MatrixRole::MlpDown, 1536), QuantType::Q4_0);
  EXPECT_EQ(p.quant_for(MatrixRole::LmHead, 512), QuantType::Q8_0);
  EXPECT_EQ(p.quant_for(MatrixRole::AttnOut, 100), std::nullopt);  // not whole blocks: stays float
  p.scheme = WeightScheme::Q8_0;
  EXPECT_EQ(p.quant_for(MatrixRole::AttnQkv, 64), QuantType::Q8_0);
  p.scheme = WeightScheme::Native;
  EXPECT_EQ(p.quant_for(MatrixRole::AttnQkv, 64), std::nullopt);
}

// llama.cpp (llama-quant.cpp): use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2; Q4_K_M gives
// attn_v and ffn_down Q6_K in those layers and the output tensor Q6_K; attn_q and attn_k stay Q4_K.
TEST(WeightPlan, Q4KMFollowsLlamaCppsMix) {
  const int n = 20;
  int more = 0;
  for (int layer = 0; layer < n; ++layer) {
    const bool expect_more = layer < 2 || layer >= 17 || (layer - 2) % 3 == 2;
    more += expect_more;
    WeightPlan p{DType::BF16, WeightScheme::Q4_K_M, layer, n};
    const QuantType big = expect_more ? QuantType::Q6_K : QuantType::Q4_K;
    EXPECT_EQ(p.quant_for(MatrixRole::MlpDown, 1536), big) << layer;
    EXPECT_EQ(p.quant_for(MatrixRole::AttnV, 512), big) << layer;
    EXPECT_EQ(p.quant_for(part_role(MatrixRole::AttnQkv, 2), 512), big) << layer;  // the fused product's v
    EXPECT_EQ(p.quant_for(MatrixRole::AttnQkv, 512), QuantType::Q4_K) << layer;  // its q and k
    EXPECT_EQ(p.quant_for(MatrixRole::MlpGateUp, 512), QuantType::Q4_K) << layer;
    EXPECT_EQ(p.quant_for(MatrixRole::AttnOut, 512), QuantType::Q4_K) << layer;
  }
  EXPECT_EQ(more, 10);  // 0, 1, 4, 7, 10, 13, 16, 17, 18, 19
  WeightPlan head{DType::BF16, WeightScheme::Q4_K_M, -1, n};
  EXPECT_EQ(head.quant_for(MatrixRole::LmHead, 512), QuantType::Q6_K);
  EXPECT_EQ(head.quant_for(MatrixRole::AttnOut, 96), QuantType::Q8_0);  // not 256-wide: the fallback
}

// A fused product's parts grouped into runs of one format: q, k in Q4_K and v in Q6_K are two runs; equal formats one.
TEST(WeightPlan, FormatRunsSplitWhereTheFormatChanges) {
  EXPECT_EQ(format_runs({12, 12, 14}), (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(format_runs({8, 8, 8}), (std::vector<size_t>{0, 3}));
  EXPECT_EQ(format_runs({-1, 12, -1}), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(format_runs({2}), (std::vector<size_t>{0, 1}));
}

// A folder whose widths no quantized format takes (hidden 200, 4 heads of 10, intermediate 500: no multiple of 32)
// loads with --quantize as its float type and is labelled so; where only some widths fit, the label lists the float
// format beside the quantized one.
TEST(WeightPlan, WidthsNoFormatTakesRunAsFloatAndSaySo) {
  ModelConfig c = tiny_qwen3_config(/*vocab=*/64, /*hidden=*/200, /*layers=*/1);
  c.head_dim = 10;
  c.intermediate_size = 500;
  const std::string none_fit = testing::temp_dir("plan_none_fit");
  write_random_model(none_fit, c, DType::BF16, 3);
  for (WeightScheme s : {WeightScheme::Q8_0, WeightScheme::Q4_0, WeightScheme::Q4_K_M}) {
    LoadOptions o;
    o.weights = s;
    auto m = TargetModel::load(none_fit, o);
    EXPECT_FALSE(m->quantized_weights()) << weight_scheme_name(s);
    EXPECT_EQ(m->weight_format(), "bf16") << weight_scheme_name(s);
  }
  c.hidden_size = 256;  // q/k/v and gate/up take Q4_0; o (40 inputs) and down (500) cannot
  const std::string some_fit = testing::temp_dir("plan_some_fit");
  write_random_model(some_fit, c, DType::BF16, 3);
  LoadOptions o;
  o.weights = WeightScheme::Q4_0;
  auto m = TargetModel::load(some_fit, o);
  EXPECT_TRUE(m->quantized_weights());
  EXPECT_EQ(m->weight_format(), "q4_0 (projections Q4_0+bf16, lm_head Q8_0)");
}

}  // namespace
}  // namespace ts
