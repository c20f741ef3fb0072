// GGUF targets (model/gguf_model.h) against the Hugging Face checkpoints they were converted from: the fixtures in
// tests/data/gguf_model/ are written by tools/py/make_gguf_model_fixtures.py from tests/data/golden/ the way
// llama.cpp's convert_hf_to_gguf.py writes them (names, metadata, llama's Q/K permutation, rope_freqs for llama3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/gguf_model.h"

namespace ts {
namespace {

struct Fixture {
  const char* gguf;    // tests/data/gguf_model/<gguf>.gguf
  const char* golden;  // tests/data/golden/<golden>/
  bool q8_projections;
};
const Fixture kFixtures[] = {
    {"qwen3_gqa_f32", "qwen3_gqa_f32", false},   {"qwen2_f32", "qwen2_f32", false},
    {"llama_f32", "llama_f32", false},           {"llama31_llama3_f32", "llama31_llama3_f32", false},
    {"qwen25_yarn_f32", "qwen25_yarn_f32", false}, {"llama_bf16_q8_0", "llama_bf16", true},
};

std::string gguf_path(const Fixture& f) { return std::string(TS_TEST_DATA) + "/gguf_model/" + f.gguf + ".gguf"; }
std::string golden_dir(const Fixture& f) { return std::string(TS_TEST_DATA) + "/golden/" + f.golden; }

void expect_same_config(const ModelConfig& g, const ModelConfig& h) {
  EXPECT_EQ(g.architecture, h.architecture);
  EXPECT_EQ(g.vocab_size, h.vocab_size);
  EXPECT_EQ(g.hidden_size, h.hidden_size);
  EXPECT_EQ(g.intermediate_size, h.intermediate_size);
  EXPECT_EQ(g.num_layers, h.num_layers);
  EXPECT_EQ(g.num_heads, h.num_heads);
  EXPECT_EQ(g.num_kv_heads, h.num_kv_heads);
  EXPECT_EQ(g.head_dim, h.head_dim);
  EXPECT_EQ(g.rms_norm_eps, h.rms_norm_eps);
  EXPECT_EQ(g.rope.type, h.rope.type) << rope_type_name(g.rope.type) << " vs " << rope_type_name(h.rope.type);
  EXPECT_EQ(g.rope.theta, h.rope.theta);
  EXPECT_EQ(g.rope.factor, h.rope.factor);
  EXPECT_EQ(g.rope.low_freq_factor, h.rope.low_freq_factor);
  EXPECT_EQ(g.rope.high_freq_factor, h.rope.high_freq_factor);
  EXPECT_EQ(g.rope.original_max_position_embeddings, h.rope.original_max_position_embeddings);
  EXPECT_EQ(g.rope.beta_fast, h.rope.beta_fast);
  EXPECT_EQ(g.rope.beta_slow, h.rope.beta_slow);
  EXPECT_EQ(g.rope.mscale, h.rope.mscale);
  EXPECT_EQ(g.rope.mscale_all_dim, h.rope.mscale_all_dim);
  EXPECT_EQ(g.rope.attention_factor, h.rope.attention_factor);
  EXPECT_EQ(g.rope.truncate, h.rope.truncate);
  EXPECT_EQ(g.max_position_embeddings, h.max_position_embeddings);
  EXPECT_EQ(g.tie_word_embeddings, h.tie_word_embeddings);
  EXPECT_EQ(g.qk_norm, h.qk_norm);
  EXPECT_EQ(g.qkv_bias, h.qkv_bias);
  EXPECT_EQ(g.eos_token_ids, h.eos_token_ids);
  EXPECT_EQ(g.bos_token_id, h.bos_token_id);
}

// The Q8_0 rows of a tensor dequantized (ggml block_q8_0: f16 d, int8 qs[32]).
std::vector<float> dequantize_q8_0(const uint8_t* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* block = data + b * 34;
    uint16_t d16;
    std::memcpy(&d16, block, 2);
    const float d = f16_to_f32(d16);
    for (int k = 0; k < 32; ++k) out[size_t(b * 32 + k)] = d * float(int8_t(block[2 + k]));
  }
  return out;
}

class GgufFixture : public ::testing::TestWithParam<Fixture> {};

TEST_P(GgufFixture, ConfigEqualsTheSourceConfigJson) {
  const io::GgufFile gguf(gguf_path(GetParam()));
  expect_same_config(model_config_from_gguf(gguf), load_model_config(golden_dir(GetParam())));
}

// Every GGUF tensor maps to a Hugging Face name (rope_freqs.weight to ""), the names are exactly the checkpoint's,
// the inverse map gives the GGUF name back, and shapes agree.
TEST_P(GgufFixture, NameMapCoversEveryTensor) {
  const io::GgufFile gguf(gguf_path(GetParam()));
  const io::Checkpoint ckpt(golden_dir(GetParam()));
  const std::string arch = gguf.get_string("general.architecture");
  std::set<std::string> mapped;
  for (const io::GgufTensor& t : gguf.tensors()) {
    SCOPED_TRACE(t.name);
    const auto m = gguf_tensor_to_hf(t.name, arch);
    ASSERT_TRUE(m.has_value());
    if (m->hf_name.empty()) {
      EXPECT_EQ(t.name, "rope_freqs.weight");
      continue;
    }
    EXPECT_TRUE(mapped.insert(m->hf_name).second) << "two GGUF tensors map to " << m->hf_name;
    EXPECT_EQ(hf_tensor_to_gguf(m->hf_name), t.name);
    ASSERT_TRUE(ckpt.has(m->hf_name)) << m->hf_name;
    EXPECT_EQ(t.row_major_shape(), ckpt.tensor(m->hf_name).shape);
    const bool qk = t.name.find("attn_q.") != std::string::npos || t.name.find("attn_k.") != std::string::npos;
    EXPECT_EQ(m->rows, arch == "llama" && qk ? GgufRowOrder::LlamaRopeQK : GgufRowOrder::Same);
  }
  const std::vector<std::string> names = ckpt.names();
  EXPECT_EQ(mapped, std::set<std::string>(names.begin(), names.end()));
}

// Each tensor, rows put back in Hugging Face order, equals the checkpoint's: bit for bit for F32 tensors, within
// Q8_0's rounding (half a step of the block's scale, plus the f16 scale's rounding) for the quantized ones.
TEST_P(GgufFixture, TensorsInHuggingFaceOrderEqualTheCheckpoint) {
  const io::GgufFile gguf(gguf_path(GetParam()));
  const io::Checkpoint ckpt(golden_dir(GetParam()));
  const ModelConfig c = model_config_from_gguf(gguf);
  const std::string arch = gguf.get_string("general.architecture");
  int permuted = 0, quantized = 0;
  for (const io::GgufTensor& t : gguf.tensors()) {
    SCOPED_TRACE(t.name);
    const auto m = gguf_tensor_to_hf(t.name, arch);
    ASSERT_TRUE(m.has_value());
    if (m->hf_name.empty()) continue;
    std::vector<uint8_t> rows(t.data, t.data + t.nbytes);
    if (m->rows == GgufRowOrder::LlamaRopeQK) {
      llama_rope_unpermute_rows(t.data, rows.data(), t.rows(), t.row_bytes(), c.head_dim);
      ++permuted;
    }
    const std::vector<float> expected = io::to_f32(ckpt.tensor(m->hf_name));
    ASSERT_EQ(int64_t(expected.size()), t.numel());
    if (t.ggml_type == io::ggml_type::F32) {
      EXPECT_EQ(std::memcmp(rows.data(), expected.data(), t.nbytes), 0);
      continue;
    }
    ASSERT_EQ(t.ggml_type, io::ggml_type::Q8_0);
    ++quantized;
    const std::vector<float> got = dequantize_q8_0(rows.data(), t.numel());
    for (int64_t b = 0; b < t.numel() / 32; ++b) {
      float amax = 0;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::abs(expected[size_t(b * 32 + k)]));
      const float tol = amax / 127 * 0.5f * 1.01f + amax * 1e-3f;  // half a step; the f16 scale's rounding
      for (int k = 0; k < 32; ++k) {
        const size_t i = size_t(b * 32 + k);
        ASSERT_NEAR(got[i], expected[i], tol) << "value " << i;
      }
    }
  }
  const bool llama = arch == "llama";
  EXPECT_EQ(permuted, llama ? 2 * c.num_layers : 0);
  EXPECT_EQ(quantized, GetParam().q8_projections ? 7 * c.num_layers : 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufFixture, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param.gguf); });

// --- the permutation itself ------------------------------------------------------------------------------------

// LlamaModel.permute, written as the reshape it is: [heads, 2, half] -> [heads, half, 2].
std::vector<int64_t> converter_permutation(int64_t rows, int64_t head_dim) {
  const int64_t heads = rows / head_dim, half = head_dim / 2;
  std::vector<int64_t> gguf_holds(static_cast<size_t>(rows));  // gguf_holds[g] = the HF row GGUF row g holds
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) gguf_holds[size_t(h * head_dim + i * 2 + j)] = h * head_dim + j * half + i;
  return gguf_holds;
}

TEST(GgufLlamaRope, RowMapsMatchTheConverterAndInvertEachOther) {
  for (int64_t head_dim : {2, 4, 8, 12, 64, 128}) {
    for (int64_t heads : {1, 3, 8}) {
      const int64_t rows = heads * head_dim;
      const std::vector<int64_t> gguf_holds = converter_permutation(rows, head_dim);
      for (int64_t g = 0; g < rows; ++g) {
        ASSERT_EQ(llama_rope_gguf_row_to_hf_row(g, head_dim), gguf_holds[size_t(g)]) << head_dim << " " << g;
        ASSERT_EQ(llama_rope_hf_row_to_gguf_row(gguf_holds[size_t(g)], head_dim), g);
      }
    }
  }
  // Head 0 of 8: GGUF rows 0..7 hold Hugging Face rows 0, 4, 1, 5, 2, 6, 3, 7.
  std::vector<int64_t> head0;
  for (int64_t g = 0; g < 8; ++g) head0.push_back(llama_rope_gguf_row_to_hf_row(g, 8));
  EXPECT_EQ(head0, (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
}

TEST(GgufLlamaRope, UnpermuteRowsMovesWholeRowsAndChecksHeads) {
  const int64_t head_dim = 4, rows = 8;
  const size_t row_bytes = 3;
  std::vector<uint8_t> gguf(rows * row_bytes), hf(rows * row_bytes);
  for (int64_t g = 0; g < rows; ++g)
    for (size_t b = 0; b < row_bytes; ++b) gguf[size_t(g) * row_bytes + b] = uint8_t(10 * g + b);
  llama_rope_unpermute_rows(gguf.data(), hf.data(), rows, row_bytes, head_dim);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t b = 0; b < row_bytes; ++b)
      EXPECT_EQ(hf[size_t(r) * row_bytes + b], uint8_t(10 * llama_rope_hf_row_to_gguf_row(r, head_dim) + b));
  EXPECT_THROW(llama_rope_unpermute_rows(gguf.data(), hf.data(), 6, row_bytes, head_dim), Error);
  EXPECT_THROW(llama_rope_unpermute_rows(gguf.data(), hf.data(), rows, row_bytes, 3), Error);
}

// --- llama3 RoPE from rope_freqs -------------------------------------------------------------------------------

// The converter's table (LlamaModel.generate_extra_tensors), in float32 freqs as torch computes them.
std::vector<float> converter_llama3_table(double theta, int dim, double factor, double low, double high, double old) {
  std::vector<float> out;
  for (int i = 0; i < dim / 2; ++i) {
    const float freq = 1.0f / std::pow(float(theta), float(2 * i) / float(dim));
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < old / high) out.push_back(1.0f);
    else if (wavelen > old / low) out.push_back(float(factor));
    else {
      const double smooth = (old / wavelen - low) / (high - low);
      out.push_back(float(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

TEST(GgufLlama3Rope, RecoversPublishedParameters) {
  // Llama 3.1 / 3.2 / 3.3: theta 5e5, head_dim 128 (64 for 3.2 1B / 3B), factor 8 (32 for 3.2), low 1, high 4, 8192.
  struct Case { double theta; int dim; double factor, high, old; };
  for (const Case& k : {Case{500000, 128, 8, 4, 8192}, Case{500000, 64, 32, 4, 8192}, Case{500000, 16, 8, 4, 256},
                        Case{10000, 128, 4, 2, 4096}, Case{500000, 8, 8, 4, 256}}) {
    SCOPED_TRACE(::testing::Message() << "dim " << k.dim << " factor " << k.factor << " high " << k.high << " old " << k.old);
    const std::vector<float> table = converter_llama3_table(k.theta, k.dim, k.factor, 1.0, k.high, k.old);
    const RopeConfig r = llama3_rope_from_factors(table, k.theta, k.dim, "test");
    EXPECT_EQ(r.type, RopeType::Llama3);
    EXPECT_EQ(r.factor, k.factor);
    EXPECT_EQ(r.low_freq_factor, 1.0);
    EXPECT_EQ(r.theta, k.theta);
    // Where the smooth band has fewer than two entries, other (high, old) pairs give the same table.
    int smooth = 0;
    for (float v : table) smooth += v != 1.0f && v != float(k.factor);
    if (smooth >= 2 || k.high == 4) {
      EXPECT_EQ(r.high_freq_factor, k.high);
      if (smooth >= 1) {
        EXPECT_EQ(r.original_max_position_embeddings, int(k.old));
      }
    }
    // Whatever was recovered reproduces the table.
    const std::vector<float> again = converter_llama3_table(k.theta, k.dim, r.factor, r.low_freq_factor,
                                                            r.high_freq_factor, r.original_max_position_embeddings);
    for (size_t i = 0; i < table.size(); ++i) EXPECT_NEAR(again[i], table[i], 1e-3 * table[i]) << i;
  }
}

TEST(GgufLlama3Rope, OnesAreDefaultAndOtherTablesAreRefused) {
  EXPECT_EQ(llama3_rope_from_factors(std::vector<float>(8, 1.0f), 1e4, 16, "test").type, RopeType::Default);
  std::vector<float> table = converter_llama3_table(500000, 128, 8, 1, 4, 8192);
  std::reverse(table.begin(), table.end());  // scaling the high frequencies: not llama3
  EXPECT_THROW(llama3_rope_from_factors(table, 500000, 128, "test"), Error);
  EXPECT_THROW(llama3_rope_from_factors(std::vector<float>(4, 0.5f), 1e4, 8, "test"), Error);
  EXPECT_THROW(llama3_rope_from_factors(std::vector<float>(3, 2.0f), 1e4, 8, "test"), Error);  // wrong length
}

// --- names and errors ------------------------------------------------------------------------------------------

TEST(GgufNames, MapsAndRefuses) {
  auto hf = [](const std::string& name, const std::string& arch) {
    const auto m = gguf_tensor_to_hf(name, arch);
    return m ? m->hf_name : std::string("<none>");
  };
  EXPECT_EQ(hf("blk.17.attn_output.weight", "qwen3"), "model.layers.17.self_attn.o_proj.weight");
  EXPECT_EQ(hf("blk.0.attn_k_norm.weight", "qwen3"), "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(hf("blk.3.attn_v.bias", "qwen2"), "model.layers.3.self_attn.v_proj.bias");
  EXPECT_EQ(hf("blk.3.ffn_norm.weight", "llama"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_tensor_to_hf("blk.2.attn_q.bias", "qwen2")->rows, GgufRowOrder::Same);
  EXPECT_EQ(gguf_tensor_to_hf("blk.2.attn_q.bias", "llama")->rows, GgufRowOrder::LlamaRopeQK);
  EXPECT_EQ(gguf_tensor_to_hf("blk.2.attn_v.weight", "llama")->rows, GgufRowOrder::Same);
  for (const char* refused : {"blk.0.attn_qkv.weight", "blk.0.ffn_gate_exps.weight", "blk.x.attn_q.weight",
                              "blk.01.attn_q.weight", "blk..attn_q.weight", "blk.0.attn_rot_embd", "token_embd"})
    EXPECT_EQ(hf(refused, "llama"), "<none>") << refused;
  EXPECT_EQ(hf("rope_freqs.weight", "qwen3"), "<none>");
  EXPECT_EQ(hf("token_embd.weight", "gemma3"), "<none>");
  EXPECT_EQ(hf_tensor_to_gguf("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
  EXPECT_EQ(hf_tensor_to_gguf("lm_head.weight"), "output.weight");
  EXPECT_FALSE(hf_tensor_to_gguf("model.layers.1.mlp.experts.0.down_proj.weight").has_value());
}

// A fixture's bytes with every occurrence of `from` replaced by `to` (same length), parsed in memory.
struct Patched {
  std::string bytes;
  io::GgufFile file;
};
Patched patched(const std::string& fixture, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  std::string bytes = read_text_file(std::string(TS_TEST_DATA) + "/gguf_model/" + fixture + ".gguf");
  for (size_t p = bytes.find(from); p != std::string::npos; p = bytes.find(from, p + to.size()))
    bytes.replace(p, from.size(), to);
  io::GgufFile f = io::GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "patched.gguf");
  return {std::move(bytes), std::move(f)};
}

std::string error_of(const io::GgufFile& f) {
  try {
    model_config_from_gguf(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GgufConfigErrors, NameTheFileAndKey) {
  // Note: Patched keeps the bytes alive next to the parsed view of them.
  const Patched gemma = patched("qwen3_gqa_f32", "qwen3", "gemma");
  std::string msg = error_of(gemma.file);
  EXPECT_NE(msg.find("patched.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unsupported architecture 'gemma'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("general.architecture"), std::string::npos) << msg;

  const Patched no_ctx = patched("llama_f32", "llama.context_length", "llama.context_lengtX");
  msg = error_of(no_ctx.file);
  EXPECT_NE(msg.find("patched.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama.context_length"), std::string::npos) << msg;

  const Patched no_base = patched("qwen2_f32", "qwen2.rope.freq_base", "qwen2.rope.freq_basX");
  msg = error_of(no_base.file);
  EXPECT_NE(msg.find("qwen2.rope.freq_base"), std::string::npos) << msg;

  const Patched longrope = patched("qwen25_yarn_f32", std::string("\x04\0\0\0\0\0\0\0yarn", 12),
                                   std::string("\x04\0\0\0\0\0\0\0long", 12));
  msg = error_of(longrope.file);
  EXPECT_NE(msg.find("unsupported RoPE scaling type 'long'"), std::string::npos) << msg;

  const Patched no_embed = patched("qwen3_gqa_f32", "token_embd.weight", "token_embX.weight");
  msg = error_of(no_embed.file);
  EXPECT_NE(msg.find("token_embd.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ts
