// treespark make-model: write a random-weight checkpoint folder (and optionally a matching drafter), so the
// engine can be tried and benchmarked without downloading anything.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "model/random_checkpoint.h"

namespace ts::cli {

int cmd_make_model(int argc, char** argv) {
  CLI::App app{"Write a random-weight Qwen3/Qwen2/Llama checkpoint folder."};
  std::string out, drafter_out, arch = "qwen3", dtype_name = "bf16", preset;
  ModelConfig c = tiny_qwen3_config(512, 128, 4);
  c.eos_token_ids = {0};
  uint64_t seed = 1;
  int block_size = 8, markov_rank = 16, drafter_layers = 1;
  bool untied = false;
  app.add_option("--out", out, "output folder")->required();
  app.add_option("--preset", preset, "tiny (default sizes below) | 0.5b (Qwen3-0.6B-like shape, ~0.5B params)");
  app.add_option("--arch", arch)->check(CLI::IsMember({"qwen3", "qwen2", "llama"}));
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_option("--vocab", c.vocab_size);
  app.add_option("--hidden", c.hidden_size);
  app.add_option("--intermediate", c.intermediate_size);
  app.add_option("--layers", c.num_layers);
  app.add_option("--heads", c.num_heads);
  app.add_option("--kv-heads", c.num_kv_heads);
  app.add_option("--head-dim", c.head_dim);
  app.add_flag("--untied", untied, "separate lm_head.weight");
  app.add_option("--seed", seed);
  app.add_option("--drafter-out", drafter_out, "also write a random DSpark drafter folder for this target");
  app.add_option("--block-size", block_size);
  app.add_option("--markov-rank", markov_rank);
  app.add_option("--drafter-layers", drafter_layers);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (preset == "0.5b") {
    // Qwen3-0.6B's shape with a 32k vocabulary: ~0.44B parameters in the layers and head.
    c.vocab_size = 32768;
    c.hidden_size = 1024;
    c.intermediate_size = 3072;
    c.num_layers = 28;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.head_dim = 128;
  } else {
    TS_CHECK(preset.empty() || preset == "tiny", "unknown preset '", preset, "' (tiny, 0.5b)");
  }
  c.architecture = arch == "qwen3" ? "Qwen3ForCausalLM" : arch == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.qk_norm = arch == "qwen3";
  c.qkv_bias = arch == "qwen2";
  c.tie_word_embeddings = !untied;
  const DType dtype = dtype_name == "f32" ? DType::F32 : dtype_name == "f16" ? DType::F16 : DType::BF16;
  write_random_model(out, c, dtype, seed);
  std::printf("wrote %s (%s, vocab %d, hidden %d, %d layers)\n", out.c_str(), c.architecture.c_str(), c.vocab_size,
              c.hidden_size, c.num_layers);
  if (!drafter_out.empty()) {
    DrafterConfig d;
    d.block_size = block_size;
    d.markov_rank = markov_rank;
    d.target_layer_ids = {0, c.num_layers / 2, c.num_layers - 1};
    d.mask_token_id = c.vocab_size - 1;
    d.num_layers = drafter_layers;
    d.hidden_size = c.hidden_size;
    d.target_hidden_size = c.hidden_size;
    d.head_dim = c.head_dim;
    d.num_heads = c.num_heads;
    d.num_kv_heads = c.num_kv_heads;
    d.intermediate_size = c.intermediate_size;
    d.rms_norm_eps = c.rms_norm_eps;
    d.rope = c.rope;
    d.vocab_size = c.vocab_size;
    write_random_drafter(drafter_out, d, dtype, seed + 1000);
    std::printf("wrote %s (DSpark drafter, block %d, rank %d)\n", drafter_out.c_str(), block_size, markov_rank);
  }
  return 0;
}

}  // namespace ts::cli
