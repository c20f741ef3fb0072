"""Regenerate every golden fixture under tests/data/golden/ (deterministic: fixed seeds, no clock, no network).

    /usr/bin/python3 tools/py/make_goldens.py [--out tests/data/golden]

Each target case is a tiny random-weight Hugging Face style checkpoint (config.json + model.safetensors, or a
sharded index) plus golden.json with the float64 reference's logits and per-layer hidden states. Each drafter case
is a drafter folder plus golden.json with random target hidden states, the block logits U and Markov conditionals.
Weights are scaled so that logits have a standard deviation of a few units: not saturated, not flat.
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_drafter import block_logits, load_drafter, markov_logits  # noqa: E402
from reference_model import expected_shapes as model_shapes, forward, load_model  # noqa: E402
from reference_drafter import expected_shapes as drafter_shapes  # noqa: E402
from safetensors_io import DTYPE_SIZES, write_safetensors  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPE_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

# Target cases. head_dim is written to every config; for Qwen2/Llama it equals hidden/heads (their HF classes
# historically ignore the key), for Qwen3 it differs from hidden/heads where the case says so.
MODEL_CASES = [
    dict(name="qwen3_gqa_f32", arch="Qwen3ForCausalLM", seed=101, vocab=128, hidden=48, layers=2, heads=4, kv=2,
         head_dim=16, inter=80, tied=False, dtype="F32", theta=1000000.0, eps=1e-6, T=12),
    dict(name="qwen3_tied_bf16", arch="Qwen3ForCausalLM", seed=102, vocab=128, hidden=64, layers=3, heads=4, kv=2,
         head_dim=16, inter=96, tied=True, dtype="BF16", theta=1000000.0, eps=1e-6, T=11),
    dict(name="qwen3_mha_f32", arch="Qwen3ForCausalLM", seed=103, vocab=128, hidden=48, layers=2, heads=3, kv=3,
         head_dim=16, inter=96, tied=True, dtype="F32", theta=10000.0, eps=1e-6, T=10),
    dict(name="qwen2_f32", arch="Qwen2ForCausalLM", seed=104, vocab=128, hidden=48, layers=2, heads=3, kv=1,
         head_dim=16, inter=80, tied=True, dtype="F32", theta=1000000.0, eps=1e-6, T=12),
    dict(name="llama_f32", arch="LlamaForCausalLM", seed=105, vocab=128, hidden=48, layers=2, heads=4, kv=2,
         head_dim=12, inter=96, tied=False, dtype="F32", theta=10000.0, eps=1e-5, T=11),
    dict(name="llama_bf16", arch="LlamaForCausalLM", seed=106, vocab=128, hidden=64, layers=3, heads=8, kv=2,
         head_dim=8, inter=96, tied=False, dtype="BF16", theta=500000.0, eps=1e-5, T=12),
    dict(name="qwen3_sharded_f32", arch="Qwen3ForCausalLM", seed=107, vocab=128, hidden=32, layers=3, heads=2,
         kv=1, head_dim=32, inter=64, tied=False, dtype="F32", theta=1000000.0, eps=1e-6, T=12, shards=2),
    # Scaled RoPE in the published spellings. Positions are spread over [0, span) (sorted, so rows stay causal),
    # far beyond original_max_position_embeddings, so every scaled frequency band turns visibly.
    dict(name="llama31_llama3_f32", arch="LlamaForCausalLM", seed=108, vocab=128, hidden=48, layers=2, heads=4,
         kv=2, head_dim=16, inter=96, tied=False, dtype="F32", theta=500000.0, eps=1e-5, T=12, max_pos=2048,
         span=1000, rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 256, "rope_type": "llama3"}),
    dict(name="qwen25_yarn_f32", arch="Qwen2ForCausalLM", seed=109, vocab=128, hidden=48, layers=2, heads=4, kv=2,
         head_dim=16, inter=80, tied=True, dtype="F32", theta=1000000.0, eps=1e-6, T=12, max_pos=1024, span=1000,
         rope_scaling={"factor": 4.0, "original_max_position_embeddings": 256, "type": "yarn"}),
    dict(name="qwen3_v5_linear_f32", arch="Qwen3ForCausalLM", seed=110, vocab=128, hidden=48, layers=2, heads=4,
         kv=2, head_dim=16, inter=80, tied=True, dtype="F32", theta=10000.0, eps=1e-6, T=12, max_pos=2048, span=1000,
         rope_parameters={"rope_type": "linear", "factor": 4.0}),
]

DRAFTER_CASES = [
    dict(name="drafter_b4_r8", seed=201, block=4, rank=8, layers=1, hidden=32, heads=2, kv=2, head_dim=16, inter=64,
         vocab=128, target_hidden=32, taps=[0, 2], mask=127, n_ctx=6, anchor=37, dtype="F32", theta=1000000.0,
         legacy=True),
    dict(name="drafter_b7_r16", seed=202, block=7, rank=16, layers=2, hidden=48, heads=4, kv=2, head_dim=16,
         inter=96, vocab=128, target_hidden=64, taps=[0, 1, 3], mask=3, n_ctx=9, anchor=90, dtype="BF16",
         theta=10000.0, legacy=True),
    # As published DSpark drafters (saved by transformers v5): rope_parameters with rope_theta 1e6, no
    # target_hidden_size key, a hidden size unlike the target's (the tap width comes from the target).
    dict(name="drafter_v5_b5_r8", seed=203, block=5, rank=8, layers=1, hidden=32, heads=2, kv=1, head_dim=16,
         inter=64, vocab=128, target_hidden=48, target_layers=4, taps=[1, 3], mask=126, n_ctx=10, anchor=5,
         dtype="F32", theta=1000000.0),
    # No Markov head (DFlash-style): markov_rank 0, no markov tensors; conditionals are the base rows.
    dict(name="drafter_nomarkov_b4", seed=204, block=4, rank=0, layers=1, hidden=32, heads=2, kv=2, head_dim=16,
         inter=64, vocab=128, target_hidden=64, target_layers=2, taps=[0, 1], mask=127, n_ctx=7, anchor=11,
         dtype="F32", theta=1000000.0),
]

MODEL_TYPES = {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}


# ---------------------------------------------------------------- random weights

def random_weight(gen, name, shape):
    """One tensor, scaled by its role so activations stay O(1) and logits have std of a few units."""
    normal = lambda std: torch.randn(shape, generator=gen, dtype=torch.float64) * std  # noqa: E731
    if name.endswith("norm.weight"):  # all RMSNorm weights: ~1 with noise, so a wrong norm weight shows
        return 1.0 + normal(0.15)
    if name.endswith(".bias"):
        return normal(0.3)
    if "embed_tokens" in name or "lm_head" in name:
        return normal(3.0 / math.sqrt(shape[1]))  # normed rows of RMS ~1 -> logits std ~3
    if "markov_w" in name:
        return normal(shape[1] ** -0.25)  # W2 @ W1[t] has std ~1
    if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
        return normal(0.7 / math.sqrt(shape[1]))  # residual branches a bit smaller than the stream
    return normal(1.0 / math.sqrt(shape[1]))  # q/k/v/gate/up/fc: unit-variance outputs


def random_weights(gen, shapes):
    return {name: random_weight(gen, name, shapes[name]).to(torch.float32) for name in sorted(shapes)}


# ---------------------------------------------------------------- file writing

def fmt_float(x):
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x} in a golden")
    return repr(float(f"{x:.9g}"))  # shortest repr of the 9-significant-digit value


def dump_json(obj, indent=0):
    """JSON with one numeric row per line (small diffs, readable), floats at 9 significant digits."""
    pad = " " * indent
    if isinstance(obj, dict):
        items = [f'{pad}  {json.dumps(k)}: {dump_json(v, indent + 2).lstrip()}' for k, v in obj.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(e, (list, tuple, dict)) for e in obj):
            return pad + "[" + ",".join(dump_json(e) for e in obj) + "]"
        return pad + "[\n" + ",\n".join(dump_json(e, indent + 2) for e in obj) + "\n" + pad + "]"
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return pad + json.dumps(obj)
    return pad + fmt_float(obj)


def write_json(path, obj):
    with open(path, "w") as f:
        f.write(dump_json(obj) + "\n")


def to_lists(t):
    return t.tolist() if isinstance(t, torch.Tensor) else [to_lists(e) for e in t]


def round9(t):
    """Round a tensor to the values its 9-digit JSON text will parse back to."""
    return torch.tensor([[float(f"{v:.9g}") for v in row] for row in t.tolist()], dtype=torch.float64)


def write_checkpoint(folder, weights, dtype, shards=1):
    """model.safetensors, or `shards` files split by cumulative size (a layer may straddle two shards, as in HF)."""
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), {n: (t, dtype) for n, t in weights.items()})
        return
    names = sorted(weights)
    sizes = [weights[n].numel() * DTYPE_SIZES[dtype] for n in names]
    total, target, acc, shard_of = sum(sizes), sum(sizes) / shards, 0, {}
    for name, size in zip(names, sizes):
        shard_of[name] = min(int(acc // target), shards - 1)
        acc += size
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    for i, fname in enumerate(files):
        part = {n: (weights[n], dtype) for n in names if shard_of[n] == i}
        write_safetensors(os.path.join(folder, fname), part)
    index = {"metadata": {"total_size": total}, "weight_map": {n: files[shard_of[n]] for n in names}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def fresh_dir(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


# ---------------------------------------------------------------- cases

def model_config(c):
    config = {
        "architectures": [c["arch"]], "model_type": MODEL_TYPES[c["arch"]], "hidden_act": "silu",
        "hidden_size": c["hidden"], "intermediate_size": c["inter"], "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"], "num_key_value_heads": c["kv"], "head_dim": c["head_dim"],
        "rms_norm_eps": c["eps"], "rope_theta": c["theta"], "vocab_size": c["vocab"],
        "tie_word_embeddings": c["tied"], "max_position_embeddings": c.get("max_pos", 512),
        "torch_dtype": DTYPE_NAMES[c["dtype"]], "bos_token_id": 1, "eos_token_id": 2,
    }
    if "rope_scaling" in c:  # transformers 4.x spelling, as Llama-3.1 and Qwen2.5 folders are published
        config["rope_scaling"] = c["rope_scaling"]
    if "rope_parameters" in c:  # transformers v5 spelling: no top-level rope_theta, "dtype" for "torch_dtype"
        del config["rope_theta"], config["torch_dtype"]
        config["rope_parameters"] = dict(c["rope_parameters"], rope_theta=c["theta"])
        config["dtype"] = DTYPE_NAMES[c["dtype"]]
        config["transformers_version"] = "5.0.0"
    return config


def case_positions(gen, c):
    """RoPE positions of the T rows: 0..T-1, or sorted distinct draws from [0, span) starting at 0."""
    if "span" not in c:
        return None
    rest = (torch.randperm(c["span"] - 1, generator=gen)[: c["T"] - 1] + 1).sort().values
    return [0] + rest.tolist()


def make_model_case(out_root, c):
    from reference_model import ModelConfig
    folder = os.path.join(out_root, c["name"])
    fresh_dir(folder)
    config = model_config(c)
    write_json(os.path.join(folder, "config.json"), config)
    gen = torch.Generator().manual_seed(c["seed"])
    weights = random_weights(gen, model_shapes(ModelConfig(config)))
    write_checkpoint(folder, weights, c["dtype"], c.get("shards", 1))
    input_ids = torch.randint(0, c["vocab"], (c["T"],), generator=gen).tolist()
    positions = case_positions(gen, c)
    # Compute from the files just written, so the golden reflects exactly the stored (e.g. bf16-rounded) weights.
    cfg, w = load_model(folder)
    logits, hidden = forward(cfg, w, input_ids, positions=positions)
    layers = list(range(cfg.n_layers))
    golden = {"input_ids": input_ids}
    if positions is not None:
        golden["positions"] = positions
    golden.update({"weights_dtype": c["dtype"], "logits": to_lists(logits),
                   "hidden_layers": layers, "hidden": [to_lists(hidden[l]) for l in layers]})
    write_json(os.path.join(folder, "golden.json"), golden)
    return logits


def drafter_config(c):
    config = {
        "architectures": ["DSparkDrafter"], "block_size": c["block"], "markov_rank": c["rank"],
        "target_layer_ids": c["taps"], "mask_token_id": c["mask"], "num_hidden_layers": c["layers"],
        "hidden_size": c["hidden"], "head_dim": c["head_dim"], "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv"], "intermediate_size": c["inter"], "rms_norm_eps": 1e-6,
    }
    if c.get("legacy"):  # the layout treespark wrote before: top-level rope_theta, target_hidden_size (consistent)
        config.update({"rope_theta": c["theta"], "vocab_size": c["vocab"], "target_hidden_size": c["target_hidden"],
                       "torch_dtype": DTYPE_NAMES[c["dtype"]]})
        return config
    if c["rank"] > 0:
        config["markov_head_type"] = "vanilla"
    else:
        del config["markov_rank"]  # absent = no Markov head
    config.update({"rope_parameters": {"rope_theta": c["theta"], "rope_type": "default"},
                   "max_position_embeddings": 4096, "vocab_size": c["vocab"], "dtype": DTYPE_NAMES[c["dtype"]],
                   "transformers_version": "5.0.0"})
    return config


def make_drafter_case(out_root, c):
    from reference_drafter import DrafterConfig
    folder = os.path.join(out_root, c["name"])
    fresh_dir(folder)
    config = drafter_config(c)
    write_json(os.path.join(folder, "config.json"), config)
    gen = torch.Generator().manual_seed(c["seed"])
    weights = random_weights(gen, drafter_shapes(DrafterConfig(config, c["target_hidden"])))
    write_checkpoint(folder, weights, c["dtype"])
    # Target hidden states grow with depth in real models: give each tap its own scale.
    taps = [torch.randn(c["n_ctx"], c["target_hidden"], generator=gen, dtype=torch.float64) * (1.0 + 2.0 * i)
            for i in range(len(c["taps"]))]
    target_hidden = round9(torch.cat(taps, dim=1))  # [n_ctx, n_taps*Ht], exactly what the JSON will hold
    cfg, w = load_drafter(folder, c["target_hidden"])
    U = block_logits(cfg, w, target_hidden, c["anchor"])  # [B, V]
    # Conditionals: the greedy chain (parent of depth d = argmax at depth d-1; depth 1 = anchor), plus a few
    # random parents so a test cannot pass by only handling argmax parents.
    conditionals, parent = [], c["anchor"]
    for depth in range(1, cfg.block_size + 1):
        logits = markov_logits(cfg, w, U, depth, parent)
        conditionals.append({"depth": depth, "parent": parent, "logits": logits.tolist()})
        parent = int(logits.argmax())
    for depth in (2, cfg.block_size):
        parent = int(torch.randint(0, cfg.vocab, (1,), generator=gen))
        conditionals.append({"depth": depth, "parent": parent,
                             "logits": markov_logits(cfg, w, U, depth, parent).tolist()})
    write_json(os.path.join(folder, "golden.json"), {
        "target_hidden_size": c["target_hidden"], "target_num_layers": c.get("target_layers", max(c["taps"]) + 1),
        "vocab_size": c["vocab"], "weights_dtype": c["dtype"], "anchor": c["anchor"], "n_ctx": c["n_ctx"],
        "target_hidden": target_hidden.tolist(), "U": U.tolist(), "conditionals": conditionals,
    })
    return U


def describe(name, logits):
    probs = torch.softmax(logits, dim=-1)
    top = probs.max(dim=-1).values
    folder_bytes = sum(os.path.getsize(os.path.join(root, f)) for root, _, fs in os.walk(name) for f in fs)
    print(f"{os.path.basename(name):20s} logits std {logits.std():6.2f}  max-prob median {top.median():.3f} "
          f"range [{top.min():.3f}, {top.max():.3f}]  distinct argmax {len(set(logits.argmax(-1).tolist()))}"
          f"/{logits.shape[0]}  {folder_bytes / 1024:.0f} KiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for c in MODEL_CASES:
        describe(os.path.join(args.out, c["name"]), make_model_case(args.out, c))
    for c in DRAFTER_CASES:
        describe(os.path.join(args.out, c["name"]), make_drafter_case(args.out, c))


if __name__ == "__main__":
    main()
