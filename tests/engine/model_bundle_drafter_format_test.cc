// --drafter-quantize auto: the drafter is quantized to Q8_0 beside a quantized target and stays native beside a
// native one; an explicit choice is kept as given either way. The calibration a bundle hands generation is the one
// fitted with its weight formats where the drafter's file has it.
#include <gtest/gtest.h>

#include "engine/model_bundle.h"
#include "spec_decode/calibration_file.h"
#include "engine/tiny_pair.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"

namespace ts {
namespace {

TEST(ModelBundleDrafterFormat, AutoFollowsTheTarget) {
  const std::string dir = testing::temp_dir("bundle_drafter_format");
  const int vocab = 20, hidden = 64, layers = 2;
  ModelConfig c = tiny_qwen3_config(vocab, hidden, layers);
  c.head_dim = 16;
  c.intermediate_size = 96;
  write_random_model(dir + "/target", c, DType::BF16, 5);
  write_random_drafter(dir + "/drafter", testing::tiny_drafter_config(vocab, hidden, layers, /*block=*/4), DType::BF16,
                       6);
  struct Case {
    const char* target;
    const char* drafter_choice;
    const char* want_drafter;
    bool target_quantized;
  };
  for (const Case& k : {Case{"native", "auto", "native", false}, Case{"q4_k_m", "auto", "q8_0", true},
                        Case{"q4_0", "auto", "q8_0", true}, Case{"q8_0", "auto", "q8_0", true},
                        Case{"q4_0", "native", "native", true}, Case{"native", "q4_0", "q4_0", false}}) {
    SCOPED_TRACE(std::string(k.target) + " target, drafter " + k.drafter_choice);
    const ModelBundle b = ModelBundle::load(dir + "/target", dir + "/drafter", k.target, k.drafter_choice);
    EXPECT_EQ(b.target->quantized_weights(), k.target_quantized);
    EXPECT_EQ(b.drafter->weight_format(), k.want_drafter);
    EXPECT_EQ(resolve_drafter_weights(k.drafter_choice, *b.target), k.want_drafter);
    // What generate and serve log: both formats, the target's first.
    const std::string summary = b.weights_summary();
    EXPECT_EQ(summary.rfind("target weights " + b.target->weight_format() + ", ", 0), 0u) << summary;
    EXPECT_NE(summary.find(std::string("; drafter weights ") + k.want_drafter), std::string::npos) << summary;
    // ... and the GEMM the target runs (a quantized target's: one of the qgemm variants).
    EXPECT_NE(summary.find(std::string(" MB per forward (") + b.target->gemm_backend() + ")"), std::string::npos)
        << summary;
    EXPECT_EQ(std::string(b.target->gemm_backend()).rfind("qgemm-", 0) == 0, k.target_quantized) << summary;
  }
  const ModelBundle alone = ModelBundle::load(dir + "/target", "", "q8_0");
  EXPECT_EQ(alone.weights_summary().find("drafter"), std::string::npos) << alone.weights_summary();
}

TEST(ModelBundleDrafterFormat, CalibrationOfTheLoadedFormats) {
  const std::string dir = testing::temp_dir("bundle_calibration_format");
  const int vocab = 20, hidden = 64, layers = 2;
  ModelConfig c = tiny_qwen3_config(vocab, hidden, layers);
  c.intermediate_size = 96;
  write_random_model(dir + "/target", c, DType::BF16, 5);
  write_random_drafter(dir + "/drafter", testing::tiny_drafter_config(vocab, hidden, layers, /*block=*/4), DType::BF16,
                       6);
  const ModelBundle probe = ModelBundle::load(dir + "/target", dir + "/drafter", "q4_0");
  spec_decode::CalibrationTable table;
  spec_decode::CalibrationEntry unrecorded, quantized;
  unrecorded.a = 1.25;
  quantized.a = 0.75;
  quantized.weights = probe.target->weight_format();
  quantized.drafter_weights = probe.drafter->weight_format();
  table.upsert(unrecorded);
  table.upsert(quantized);
  spec_decode::write_calibration_table(dir + "/drafter/" + spec_decode::kCalibrationFileName, table);
  const ModelBundle q4 = ModelBundle::load(dir + "/target", dir + "/drafter", "q4_0");
  EXPECT_EQ(q4.calibration.lookup(0).a, 0.75);
  EXPECT_EQ(q4.calibration_summary(), "calibration: 1 entry (T 0): 1 fitted with these weight formats, 0 with "
                                      "formats not recorded");
  EXPECT_EQ(ModelBundle::load(dir + "/target", dir + "/drafter").calibration.lookup(0).a, 1.25);
  EXPECT_EQ(ModelBundle::load(dir + "/target", dir + "/drafter", "q8_0").calibration.lookup(0).a, 1.25);
}

}  // namespace
}  // namespace ts
