#!/usr/bin/python3
"""GGUF model and tokenizer fixtures for src/model/gguf_model.* and src/io/gguf_tokenizer.*, written with
llama.cpp's gguf-py (GGUFWriter, quants) the way llama.cpp's convert_hf_to_gguf.py writes them.

Two commands (Debian's /usr/bin/python3 with numpy; no torch or transformers needed):

  models [--out tests/data/gguf_model]
      Tiny random targets from the Hugging Face goldens in tests/data/golden/ (committed; deterministic, so a
      rerun gives byte-identical files):
        qwen3_gqa_f32.gguf, qwen2_f32.gguf, llama_f32.gguf, llama31_llama3_f32.gguf, qwen25_yarn_f32.gguf  (F32)
        llama_bf16_q8_0.gguf: llama_bf16 with the seven projections in Q8_0 (token_embd, output, norms F32, as
                              llama-quantize --token-embedding-type f32 --output-tensor-type f32 leaves them)
        tiny_bpe_tokenizer.gguf: tokenizer-only GGUF from tests/data/tokenizer/tiny_bpe (pre "qwen2")
  tokenizer FAMILY OUT.gguf
      A tokenizer-only GGUF from .cache/tokenizers/FAMILY/ (qwen3, qwen2_5: pre "qwen2"; llama3, llama3_1:
      "llama-bpe"). These are MBs and their sources are fetched, not committed, so tests make them on demand
      into the build folder (tests/tokenizer/gguf_tokenizer_test.cc). Written to OUT.partial, then renamed.

What follows convert_hf_to_gguf.py (conversion/base.py, llama.py, qwen.py at the llama.cpp commit in .cache):
  - metadata: TextModel.set_gguf_parameters (block_count, context_length, embedding_length, feed_forward_length,
    head_count, head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon, key_length / value_length when
    config.json has head_dim, file_type; rope.scaling.* for linear and yarn); LlamaModel adds vocab_size and
    rope.dimension_count; llama3 RoPE becomes the rope_freqs.weight tensor (LlamaModel.generate_extra_tensors,
    computed here in float32 as torch does); bos / eos ids from config.json (gguf.SpecialVocab).
  - tensors: names by gguf-py's tensor map; LlamaModel.permute on q_proj / k_proj weights and biases (llama only;
    Qwen2 / Qwen3 use NEOX RoPE and are not permuted); 1-D tensors and norms F32.
  - vocabulary: TextModel.get_vocab_base + _set_vocab_gpt2 (tokens by id, [PADi] UNUSED fillers up to the
    model's vocab_size, added tokens CONTROL when special or does_token_look_special, else USER_DEFINED) and
    gguf.SpecialVocab for merges, special ids, add_bos / add_eos and the chat template. The one step left out is
    get_vocab_base's encode/decode round trip of non-normalized added tokens (it needs transformers); it leaves
    the tokens of these families unchanged.
Exit status 77: a needed input (tokenizer cache, gguf-py) is missing; the caller skips.
"""
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA_CPP = os.path.join(REPO, ".cache", "llama.cpp")
GOLDEN = os.path.join(REPO, "tests", "data", "golden")

# Tokenizer families: pre name and the model's vocab_size (the embedding rows; get_vocab_base pads to it).
TOKENIZER_FAMILIES = {
    "qwen3": ("qwen2", 151936),
    "qwen2_5": ("qwen2", 152064),
    "llama3": ("llama-bpe", 128256),
    "llama3_1": ("llama-bpe", 128256),
}


def import_gguf():
    gguf_py = os.path.join(LLAMA_CPP, "gguf-py")
    if not os.path.isdir(gguf_py):
        print(f"missing {gguf_py}: run scripts/fetch-llama-cpp-ref.sh", file=sys.stderr)
        sys.exit(77)
    sys.path.insert(0, gguf_py)
    import gguf  # noqa: E402
    return gguf


# ---------------------------------------------------------------- Hugging Face checkpoint (numpy only)

def read_safetensors(path):
    """{name: float32 array} for F32 / BF16 tensors, in file order."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").copy()
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name} has dtype {info['dtype']}")
        out[name] = a.reshape(info["shape"])
    return out


def read_folder_weights(folder):
    """{name: float32 array} of a folder's model.safetensors, or of the shards its model.safetensors.index.json
    lists (in shard order, each shard's tensors in file order)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(folder, "model.safetensors"))
    with open(index) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for shard in shards:
        out.update(read_safetensors(os.path.join(folder, shard)))
    return out


def llama_permute(w, n_head, n_head_kv):
    """LlamaModel.permute (conversion/llama.py), in numpy."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(rope, theta, dim):
    """LlamaModel.generate_extra_tensors: per-frequency factors, float32 freqs as torch computes them."""
    freqs = 1.0 / (np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = rope.get("factor", 8.0)
    low = rope.get("low_freq_factor", 1.0)
    high = rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs.astype(np.float32):
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_wl:
            out.append(1)
        elif wavelen > low_wl:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


HF_TO_GGUF = [  # (Hugging Face suffix within a layer, GGUF suffix), from gguf-py's tensor_mapping.py
    ("input_layernorm.weight", "attn_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"), ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.weight", "attn_k.weight"), ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.weight", "attn_v.weight"), ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"), ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
]
PROJECTIONS = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
               "ffn_up.weight", "ffn_down.weight")


def gguf_name(hf):
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".", 3)  # model, layers, N, rest
    assert parts[0] == "model" and parts[1] == "layers", hf
    for hf_suffix, g_suffix in HF_TO_GGUF:
        if parts[3] == hf_suffix:
            return f"blk.{parts[2]}.{g_suffix}"
    raise KeyError(hf)


def write_model(gguf, case, out_path, q8_projections=False):
    write_folder(gguf, os.path.join(GOLDEN, case), out_path,
                 f"treespark {case}" + (" q8_0 projections" if q8_projections else ""),
                 gguf.GGMLQuantizationType.Q8_0 if q8_projections else None)


# llama.cpp's file type for the weight type of a whole file (--type of gguf_from_folder.py)
FILE_TYPES = {"Q8_0": "MOSTLY_Q8_0", "Q4_0": "MOSTLY_Q4_0", "BF16": "MOSTLY_BF16"}


def q4_k_m_mix(gguf, n_layers, tied, quantize_embeddings):
    """llama.cpp's Q4_K_M choice per tensor name (llama-quant.cpp, llama_tensor_get_type, for a model without
    experts that is not Falcon): output.weight Q6_K (a tied token_embd, which serves as the output, too); attn_v and
    ffn_down Q6_K in the layers use_more_bits picks, Q4_K elsewhere; the other projections and an untied token_embd
    Q4_K. quantize_embeddings False keeps token_embd F32 (llama-quantize --token-embedding-type f32). Returns
    {name: type} as a function; None for tensors left F32."""
    T = gguf.GGMLQuantizationType

    def more_bits(i):  # use_more_bits(i_layer, n_layers); i counts attn_v / ffn_down tensors, one per layer here
        return i < n_layers // 8 or i >= 7 * n_layers // 8 or (i - n_layers // 8) % 3 == 2

    def choose(tname):
        if tname == "output.weight" or (tied and tname == "token_embd.weight" and quantize_embeddings):
            return T.Q6_K
        if tname == "token_embd.weight":
            return T.Q4_K if quantize_embeddings else None
        if not tname.endswith(PROJECTIONS):
            return None
        if tname.endswith(("attn_v.weight", "ffn_down.weight")) and more_bits(int(tname.split(".")[1])):
            return T.Q6_K
        return T.Q4_K
    return choose


def write_folder(gguf, folder, out_path, name, qtype=None, quantize_embeddings=False, mix=None, quantize=None,
                 tokenizer_pre=None):
    """A Hugging Face folder (one model.safetensors) as llama.cpp's converter writes it: the seven projections in
    qtype (a GGMLQuantizationType; None: F32), token_embd and output too when quantize_embeddings, the rest F32.
    mix "q4_k_m": per tensor as q4_k_m_mix says instead (file type MOSTLY_Q4_K_M). quantize(array, type) -> the
    blocks as uint8 [rows, row bytes]; default gguf-py's quantizer (which has no K-quants). tokenizer_pre: also
    write the folder's tokenizer.json (and tokenizer_config.json's template and special ids) as the converter does,
    under that pre-tokenizer name; None leaves the tokenizer out (bos / eos ids from config.json only)."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    arch = {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}[
        cfg["architectures"][0]]
    weights = read_folder_weights(folder)
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads")
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // n_head)
    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    if "rope_type" not in rope and "type" in rope:
        rope["rope_type"] = rope["type"]
    theta = rope.get("rope_theta", cfg.get("rope_theta"))

    w = gguf.GGUFWriter(out_path, arch=arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    # TextModel.set_gguf_parameters
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    if n_kv is not None:
        w.add_head_count_kv(n_kv)
    rtype = rope.get("rope_type")
    if rtype == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif rtype == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        for key, add in (("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", w.add_rope_scaling_yarn_beta_slow),
                         ("attention_factor", w.add_rope_scaling_yarn_attn_factor)):
            if key in rope:
                add(rope[key])
    else:
        assert rtype in (None, "default", "llama3"), rtype
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if mix == "q4_k_m":
        ftype = gguf.LlamaFileType.MOSTLY_Q4_K_M
    else:
        ftype = getattr(gguf.LlamaFileType, FILE_TYPES[qtype.name]) if qtype is not None else gguf.LlamaFileType.ALL_F32
    w.add_file_type(ftype)
    if arch == "llama":  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    if tokenizer_pre is not None:
        add_tokenizer(gguf, w, folder, tokenizer_pre, cfg["vocab_size"])
    else:
        # set_vocab: these goldens have no tokenizer; SpecialVocab still takes bos / eos from config.json.
        if "bos_token_id" in cfg:  # make-model's folders have none
            w.add_bos_token_id(cfg["bos_token_id"])
        if "eos_token_id" in cfg:
            w.add_eos_token_id(cfg["eos_token_id"])

    tensors = []  # (name, array, qtype); generate_extra_tensors come first, as in prepare_tensors
    if arch == "llama" and rtype == "llama3":
        tensors.append(("rope_freqs.weight", llama3_rope_factors(rope, theta, head_dim), None))
    choose_type = None
    if mix == "q4_k_m":
        choose_type = q4_k_m_mix(gguf, cfg["num_hidden_layers"], "lm_head.weight" not in weights, quantize_embeddings)
    for hf, a in weights.items():
        if arch == "llama" and hf.endswith(("q_proj.weight", "q_proj.bias")):
            a = llama_permute(a, n_head, n_head)
        if arch == "llama" and hf.endswith(("k_proj.weight", "k_proj.bias")):
            a = llama_permute(a, n_head, n_kv)
        tname = gguf_name(hf)
        if choose_type is not None:
            ttype = choose_type(tname)
        else:
            quantized = tname.endswith(PROJECTIONS) or (
                quantize_embeddings and tname in ("token_embd.weight", "output.weight"))
            ttype = qtype if quantized else None
        tensors.append((tname, np.ascontiguousarray(a, dtype=np.float32), ttype))
    del weights
    while tensors:  # popped, so a big model's float copies are freed tensor by tensor
        tname, a, ttype = tensors.pop(0)
        if ttype is None:
            w.add_tensor(tname, a, raw_dtype=gguf.GGMLQuantizationType.F32)
        else:
            data = (quantize or gguf.quants.quantize)(a, ttype)
            w.add_tensor(tname, data, raw_dtype=ttype)  # the byte shape is converted back, as in convert
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------- tokenizers

def does_token_look_special(t):
    """TextModel.does_token_look_special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<\uff5c") and t.endswith("\uff5c>")) or (t.startswith("<unused") and t.endswith(">")))


def add_tokenizer(gguf, w, folder, pre, vocab_size):
    """The folder's BPE tokenizer.json as _set_vocab_gpt2 writes it (tokens, types, pre name, merges, special ids,
    chat template), into the writer w; vocab_size None: the tokenizer's own size."""
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    reverse = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {}
    for a in tj.get("added_tokens", []):
        reverse[a["id"]] = a["content"]
        added[a["content"]] = a
    if vocab_size is None:
        vocab_size = max(reverse) + 1
    assert max(reverse) < vocab_size
    T = gguf.TokenType
    tokens, types = [], []
    for i in range(vocab_size):  # get_vocab_base
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(T.UNUSED)
            continue
        tok = reverse[i]
        if tok in added:
            if added[tok].get("special", False) or does_token_look_special(tok):
                types.append(T.CONTROL)
            else:
                tok = tok.replace("\u2581", " ")
                types.append(T.USER_DEFINED)
        else:
            types.append(T.NORMAL)
        tokens.append(tok)
    w.add_tokenizer_model("gpt2")  # _set_vocab_gpt2
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size).add_to_gguf(w, quiet=True)


def write_tokenizer(gguf, folder, pre, vocab_size, out_path, name):
    w = gguf.GGUFWriter(out_path, arch="llama")  # a tokenizer-only file still names an architecture
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    add_tokenizer(gguf, w, folder, pre, vocab_size)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_models(out):
    gguf = import_gguf()
    os.makedirs(out, exist_ok=True)
    for case in ("qwen3_gqa_f32", "qwen2_f32", "llama_f32", "llama31_llama3_f32", "qwen25_yarn_f32"):
        write_model(gguf, case, os.path.join(out, case + ".gguf"))
    write_model(gguf, "llama_bf16", os.path.join(out, "llama_bf16_q8_0.gguf"), q8_projections=True)
    # The committed tiny BPE (no tokenizer_config.json: no special ids, no template).
    write_tokenizer(gguf, os.path.join(REPO, "tests", "data", "tokenizer", "tiny_bpe"), "qwen2", None,
                    os.path.join(out, "tiny_bpe_tokenizer.gguf"), "treespark tiny_bpe tokenizer")
    for f in sorted(os.listdir(out)):
        print(f"{f}: {os.path.getsize(os.path.join(out, f))} bytes")


def cmd_tokenizer(family, out_path):
    if family not in TOKENIZER_FAMILIES:
        sys.exit(f"unknown family {family} (known: {', '.join(TOKENIZER_FAMILIES)})")
    folder = os.path.join(REPO, ".cache", "tokenizers", family)
    if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        print(f"missing {folder}/tokenizer.json: run scripts/fetch-test-assets.sh", file=sys.stderr)
        sys.exit(77)
    gguf = import_gguf()
    pre, vocab_size = TOKENIZER_FAMILIES[family]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    partial = f"{out_path}.partial.{os.getpid()}"
    write_tokenizer(gguf, folder, pre, vocab_size, partial, f"treespark {family} tokenizer")
    os.replace(partial, out_path)


def main():
    args = sys.argv[1:]
    if args[:1] == ["models"]:
        out = os.path.join(REPO, "tests", "data", "gguf_model")
        if len(args) == 3 and args[1] == "--out":
            out = args[2]
        elif len(args) != 1:
            sys.exit(__doc__)
        cmd_models(out)
    elif args[:1] == ["tokenizer"] and len(args) == 3:
        cmd_tokenizer(args[1], args[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
