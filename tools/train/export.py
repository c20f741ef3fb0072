"""Hugging Face folder export: a BF16 safetensors writer (no safetensors package here) and the config files of the
target (Qwen3ForCausalLM) and drafter (DSparkDrafter).

safetensors layout: 8-byte little-endian header length, JSON header {name: {dtype, shape, data_offsets: [b, e]},
"__metadata__": {...}} padded with spaces to a multiple of 8, then the raw little-endian tensor bytes.
"""
import json
import os
import shutil
import struct

import torch


def write_safetensors(path, tensors, metadata=None):
    """tensors {name: tensor} written as BF16 (row-major, offsets in name order)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.bfloat16).contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes()  # bf16 bits, little-endian on x86
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt", **(metadata or {})}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """-> {name: float32 tensor}; used by the pipeline to reload exported folders."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        assert info["dtype"] == "BF16", info
        t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.int16).view(torch.bfloat16)
        out[name] = t.reshape(info["shape"]).float()
    return out


SHARD_BYTES = 45_000_000  # shards stay under 50 MB, so a clone never meets a per-file size limit
INDEX = "model.safetensors.index.json"


def write_folder(out_dir, tensors, metadata=None, max_bytes=SHARD_BYTES):
    """model.safetensors, or, past max_bytes, model-0000i-of-0000n.safetensors + the Hugging Face index naming the
    shard of every tensor (tensors kept whole, in name order). Stale files of the other layout are removed."""
    sizes = {k: tensors[k].numel() * 2 for k in tensors}
    groups, cur, cur_bytes = [], [], 0
    for name in sorted(tensors):
        if cur and cur_bytes + sizes[name] > max_bytes:
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.append(name)
        cur_bytes += sizes[name]
    groups.append(cur)
    for fn in os.listdir(out_dir):
        if fn == INDEX or (fn.startswith("model") and fn.endswith(".safetensors")):
            os.remove(os.path.join(out_dir, fn))
    if len(groups) == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, metadata)
        return
    weight_map = {}
    for i, names in enumerate(groups):
        fn = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fn), {k: tensors[k] for k in names}, metadata)
        weight_map.update({k: fn for k in names})
    write_json(os.path.join(out_dir, INDEX), {"metadata": {"total_size": sum(sizes.values())},
                                              "weight_map": weight_map})


def read_folder(folder):
    """-> {name: float32 tensor} of a folder in either layout of write_folder."""
    index = os.path.join(folder, INDEX)
    if not os.path.exists(index):
        return read_safetensors(os.path.join(folder, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for fn in files:
        out.update(read_safetensors(os.path.join(folder, fn)))
    return out


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def export_target(model, tokenizer_dir, out_dir, tok_ids, metadata=None):
    """model: model.Target -> HF Qwen3 folder (tied embeddings: no lm_head.weight)."""
    c = model.c
    os.makedirs(out_dir, exist_ok=True)
    tensors = {"model." + k: v for k, v in model.state_dict().items()}
    write_folder(out_dir, tensors, metadata)
    write_json(os.path.join(out_dir, "config.json"), {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "rope_scaling": None,
        "max_position_embeddings": c.max_position_embeddings, "tie_word_embeddings": True,
        "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
        "torch_dtype": "bfloat16", "bos_token_id": tok_ids["<|endoftext|>"], "eos_token_id": tok_ids["<|im_end|>"],
        "pad_token_id": tok_ids["<|endoftext|>"],
    })
    write_json(os.path.join(out_dir, "generation_config.json"), {
        "bos_token_id": tok_ids["<|endoftext|>"], "eos_token_id": [tok_ids["<|im_end|>"], tok_ids["<|endoftext|>"]],
        "pad_token_id": tok_ids["<|endoftext|>"], "do_sample": True, "temperature": 0.7, "top_p": 0.9,
        "top_k": 20,
    })
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, fn), os.path.join(out_dir, fn))


def export_drafter(model, out_dir, metadata=None):
    """model: model.Drafter -> DSpark drafter folder (tensor names without a "model." prefix)."""
    c = model.c
    os.makedirs(out_dir, exist_ok=True)
    write_folder(out_dir, dict(model.state_dict()), metadata)
    write_json(os.path.join(out_dir, "config.json"), {
        "architectures": ["DSparkDrafter"], "model_type": "dspark_drafter",
        "block_size": c.block_size, "markov_rank": c.markov_rank, "target_layer_ids": list(c.target_layer_ids),
        "mask_token_id": c.mask_token_id, "num_hidden_layers": c.num_hidden_layers, "hidden_size": c.hidden_size,
        "head_dim": c.head_dim, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "intermediate_size": c.intermediate_size,
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "vocab_size": c.vocab_size,
        "target_hidden_size": c.target_hidden_size, "hidden_act": "silu", "torch_dtype": "bfloat16",
    })
