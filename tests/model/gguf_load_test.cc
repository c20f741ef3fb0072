// A target loaded from a GGUF file computes what the Hugging Face folder it was converted from computes: the same
// logits bit for bit for F32 files (config, names, Llama's Q/K row order and the forward all agree), and for the
// Q8_0 file the logits of the bf16 folder loaded with --quantize q8_0 up to the lm_head, which that file keeps in
// F32 (a bound derived below). Bad files fail naming the file and tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model_test_util.h"
#include "model/target_model.h"

namespace ts {
namespace {

const std::string kGguf = std::string(TS_TEST_DATA) + "/gguf_model/";
const std::string kGolden = std::string(TS_TEST_DATA) + "/golden/";

std::vector<int32_t> ids_for(const TargetModel& m) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(int32_t((i * 7 + 3) % m.config().vocab_size));
  return ids;
}

class GgufLoad : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufLoad, F32FileEqualsItsFolderBitForBit) {
  auto from_gguf = TargetModel::load(kGguf + GetParam() + ".gguf");
  auto from_folder = TargetModel::load(kGolden + GetParam());
  EXPECT_EQ(from_gguf->weight_format(), from_folder->weight_format());
  const std::vector<int32_t> ids = ids_for(*from_folder);
  const std::vector<float> want = testing::run_sequence(*from_folder, ids);
  const std::vector<float> got = testing::run_sequence(*from_gguf, ids);
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufLoad,
                         ::testing::Values("qwen3_gqa_f32", "qwen2_f32", "llama_f32", "llama31_llama3_f32",
                                           "qwen25_yarn_f32"));

TEST(GgufLoadQ8, RunsStoredBlocksAndMatchesTheQuantizedFolder) {
  auto from_gguf = TargetModel::load(kGguf + "llama_bf16_q8_0.gguf");
  EXPECT_NE(from_gguf->weight_format().find("Q8_0"), std::string::npos) << from_gguf->weight_format();
  // The folder's bf16 projections quantized by kernels/quant.h equal gguf-py's blocks; compute in f32 like the
  // file (its embedding is F32), so only the lm_head differs: Q8_0 in the folder, F32 in the file.
  LoadOptions lo;
  lo.weights = WeightScheme::Q8_0;
  lo.force_f32 = true;
  auto folder = TargetModel::load(kGolden + "llama_bf16", lo);
  folder->set_kv_dtype(from_gguf->kv_dtype());
  const std::vector<int32_t> ids = ids_for(*folder);
  const std::vector<float> want = testing::run_sequence(*folder, ids);
  const std::vector<float> got = testing::run_sequence(*from_gguf, ids);
  ASSERT_EQ(got.size(), want.size());
  // lm_head: Q8_0 rounds each weight by <= d/2 (d = amax/127 of its block) and each activation by its own
  // d_x/2, so a logit moves by at most ~ sum |w||x| (1/127 + 1/127): bounded by 2% of the row's largest logit
  // magnitude plus a small absolute term.
  const int vocab = folder->config().vocab_size;
  for (size_t r = 0; r < ids.size(); ++r) {
    float scale = 0;
    for (int v = 0; v < vocab; ++v) scale = std::max(scale, std::abs(want[r * vocab + v]));
    for (int v = 0; v < vocab; ++v)
      EXPECT_NEAR(got[r * vocab + v], want[r * vocab + v], 0.02f * scale + 1e-3f) << "row " << r << " token " << v;
  }
}

TEST(GgufLoadErrors, TruncatedFileNamesIt) {
  const std::string src = kGguf + "llama_f32.gguf";
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = testing::temp_dir("gguf_load") + "/cut.gguf";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  try {
    TargetModel::load(path);
    FAIL() << "a truncated GGUF loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.gguf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ts
