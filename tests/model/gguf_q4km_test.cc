// A Q4_K_M GGUF file, as llama.cpp writes one, runs exactly the model `--quantize q4_k_m` makes of the folder it
// came from: the same formats tensor for tensor (attn_v and ffn_down in Q6_K where llama.cpp's use_more_bits says,
// the fused q/k/v product then stacked from a Q4_K and a Q6_K part, nothing re-quantized) and, since ggml's own C
// quantizer wrote the file's blocks, the same logits bit for bit. The file is made on demand in the build folder
// by tools/py/gguf_from_folder.py (gguf-py's writer, ggml-quants.c compiled on the fly); the test skips when
// llama.cpp's source (scripts/fetch-llama-cpp-ref.sh) or /usr/bin/python3 with numpy is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "model/target_model.h"

namespace ts {
namespace {

class GgufQ4KM : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufQ4KM, FileRunsAsStoredAndEqualsTheQuantizedFolder) {
  // Widths the K-quants take (multiples of 256); 2 layers: use_more_bits(i, 2) holds for layer 1 only, so layer 0's
  // q/k/v is one Q4_K product and layer 1's is stacked (Q4_K q and k, Q6_K v). Untied, so the output is Q6_K
  // in both and the embedding rows stay floats (--float-embeddings).
  ModelConfig c = tiny_qwen3_config(512, 256, 2);
  c.intermediate_size = 512;
  c.head_dim = 64;  // q_dim 256, kv_dim 128
  c.tie_word_embeddings = false;
  if (GetParam() == "llama") {  // q/k rows permuted in the file
    c.architecture = "LlamaForCausalLM";
    c.qk_norm = false;
  }
  const std::string dir = testing::temp_dir("gguf_q4km");
  write_random_model(dir + "/folder", c, DType::BF16, 23);
  bool skip_only = false;
  const std::string why =
      testing::gguf_from_folder(dir + "/folder", dir + "/model.gguf", "--type q4_k_m --float-embeddings", &skip_only);
  if (!why.empty() && skip_only) GTEST_SKIP() << why;
  ASSERT_EQ(why, "");

  auto from_gguf = TargetModel::load(dir + "/model.gguf");
  EXPECT_EQ(from_gguf->weight_format().rfind("stored (", 0), 0u) << from_gguf->weight_format();
  // Every matrix is stored quantized: a requested format applies to none, and the weights are labelled as stored,
  // not as the request.
  LoadOptions q8;
  q8.weights = WeightScheme::Q8_0;
  auto asked_q8 = TargetModel::load(dir + "/model.gguf", q8);
  EXPECT_EQ(asked_q8->weight_format(), from_gguf->weight_format());
  EXPECT_EQ(asked_q8->weight_bytes(), from_gguf->weight_bytes());
  LoadOptions lo;
  lo.weights = WeightScheme::Q4_K_M;
  auto folder = TargetModel::load(dir + "/folder", lo);
  EXPECT_EQ(from_gguf->weight_bytes(), folder->weight_bytes());  // the same format for every matrix
  EXPECT_NE(folder->weight_format().find("Q4_K+Q6_K"), std::string::npos) << folder->weight_format();
  folder->set_kv_dtype(from_gguf->kv_dtype());
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(int32_t((i * 37 + 5) % c.vocab_size));
  const std::vector<float> want = testing::run_sequence(*folder, ids);
  const std::vector<float> got = testing::run_sequence(*from_gguf, ids);
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  EXPECT_EQ(differ, 0u) << "of " << got.size() << " logits";
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufQ4KM, ::testing::Values("qwen3", "llama"));

}  // namespace
}  // namespace ts
