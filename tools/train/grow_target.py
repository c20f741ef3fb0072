"""Grow a trained target into a wider and deeper one that computes the same function, and carry its drafter along.

Why: a CPU-hour trains a 4M-parameter target well but a 65M one barely (about 150 tokens/s on one core). The
speculative round only pays off when the target's decode step streams its weights from DRAM, so the shipped pair
needs a target of 100+ MB. Growing the trained small model (Net2Net-style widening, zero-initialised residual
branches for depth, as in Net2Net / bert2BERT / "stacking" papers) gives a large model that starts at the small
model's validation loss; train_target.py --init-from then trains all of it.

Widening by `--width` w (hidden H -> wH, heads and kv heads x w, intermediate x w, head_dim unchanged):
  residual stream x -> [x, ..., x] (w copies): embed_tokens E -> [E, ..., E] along the hidden axis;
  a Linear reading the residual or the MLP/attention inner units gets its input columns split w ways (W / w each
  copy), and its output rows copied w times; RMSNorm over w copies has the same rms, so norm weights are copied;
  query heads become [h_0..h_{n-1}] x w and kv heads likewise, so new query head j + k*n reads kv head
  (j + k*n) // rep = old kv head j // rep + k*nkv: the GQA grouping stays right; q/k norms (per head) are kept.
  The final norm weight is divided by w, because the tied logits sum w identical copies.
Deepening by `--depth` d: old layer i becomes layer d*i, followed by d-1 new layers whose o_proj and down_proj are
zero (their residual branch adds nothing until training moves them) and whose other weights are initialised as
train_target.py would. Tap layer L of the small model (its output) equals tap d*L + d - 1 of the grown one.
Symmetry between copies is broken by `--noise` (relative Gaussian noise on every grown weight matrix) and by the
new layers, which read the copies with different weights. With --noise 0 the grown model's logits equal the small
one's (checked below, and by the engine: greedy output is identical).

The drafter is carried along the same way: its fc reads the grown target's taps, so each tap's input columns are
split w ways (fc_t -> [fc_t / w] x w) and target_layer_ids are remapped; everything else is copied.

    /usr/bin/python3 tools/train/grow_target.py --target models/treespark-target --drafter models/treespark-drafter \
        --width 2 --depth 5 --out-target work-data/grown-target --out-drafter work-data/grown-drafter
"""
import argparse
import json
import math
import os

import torch

from export import export_drafter, export_target, read_folder
from model import Drafter, DrafterConfig, Target, TargetConfig


def load_target(folder):
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    c = TargetConfig(vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
                     intermediate_size=hf["intermediate_size"], num_hidden_layers=hf["num_hidden_layers"],
                     num_attention_heads=hf["num_attention_heads"], num_key_value_heads=hf["num_key_value_heads"],
                     head_dim=hf["head_dim"], rms_norm_eps=hf["rms_norm_eps"], rope_theta=hf["rope_theta"],
                     max_position_embeddings=hf["max_position_embeddings"])
    m = Target(c)
    w = read_folder(folder)
    m.load_state_dict({k[len("model."):]: v for k, v in w.items()})
    return m


def load_drafter(folder):
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    keys = set(DrafterConfig.__dataclass_fields__)
    c = DrafterConfig(**{k: v for k, v in hf.items() if k in keys})
    m = Drafter(c)
    m.load_state_dict(read_folder(folder))
    return m


def split_cols(W, w):
    """W [out, in] reading w identical copies of its input -> [out, w*in]."""
    return torch.cat([W / w] * w, dim=1)


def copy_rows(W, w):
    return torch.cat([W] * w, dim=0)


def widen_layer(src, dst, w):
    """Copy a small Layer into a w-times wider one so that [x]*w -> [layer(x)]*w."""
    sa, da = src.self_attn, dst.self_attn
    for name in ("q_proj", "k_proj", "v_proj"):
        getattr(da, name).weight.copy_(copy_rows(split_cols(getattr(sa, name).weight, w), w))
    da.o_proj.weight.copy_(copy_rows(split_cols(sa.o_proj.weight, w), w))
    da.q_norm.weight.copy_(sa.q_norm.weight)
    da.k_norm.weight.copy_(sa.k_norm.weight)
    sm, dm = src.mlp, dst.mlp
    dm.gate_proj.weight.copy_(copy_rows(split_cols(sm.gate_proj.weight, w), w))
    dm.up_proj.weight.copy_(copy_rows(split_cols(sm.up_proj.weight, w), w))
    dm.down_proj.weight.copy_(copy_rows(split_cols(sm.down_proj.weight, w), w))
    dst.input_layernorm.weight.copy_(src.input_layernorm.weight.repeat(w))
    dst.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight.repeat(w))


@torch.no_grad()
def grow(small, w, d, noise, seed):
    c = small.c
    big_c = TargetConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size * w,
                         intermediate_size=c.intermediate_size * w, num_hidden_layers=c.num_hidden_layers * d,
                         num_attention_heads=c.num_attention_heads * w,
                         num_key_value_heads=c.num_key_value_heads * w, head_dim=c.head_dim,
                         rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_theta,
                         max_position_embeddings=c.max_position_embeddings)
    torch.manual_seed(seed)
    big = Target(big_c)  # new layers keep this initialisation
    big.embed_tokens.weight.copy_(torch.cat([small.embed_tokens.weight] * w, dim=1))
    big.norm.weight.copy_(small.norm.weight.repeat(w) / w)
    for i, layer in enumerate(small.layers):
        widen_layer(layer, big.layers[d * i], w)
        for j in range(1, d):
            new = big.layers[d * i + j]
            new.self_attn.o_proj.weight.zero_()
            new.mlp.down_proj.weight.zero_()
    if noise > 0:
        g = torch.Generator().manual_seed(seed + 1)
        grown = [big.embed_tokens.weight] + [p for i in range(0, big_c.num_hidden_layers, d)
                                              for p in big.layers[i].parameters() if p.dim() == 2]
        for p in grown:
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return big


@torch.no_grad()
def grow_drafter(drafter, w, d, target_hidden):
    c = drafter.c
    layer_ids = [d * L + d - 1 for L in c.target_layer_ids]
    keys = set(DrafterConfig.__dataclass_fields__)
    nc = DrafterConfig(**{**{k: getattr(c, k) for k in keys}, "target_layer_ids": layer_ids,
                          "target_hidden_size": target_hidden})
    out = Drafter(nc)
    state = dict(drafter.state_dict())
    Ht = c.target_hidden_size
    fc = state["fc.weight"]  # [H, n_taps * Ht]
    state["fc.weight"] = torch.cat([split_cols(fc[:, t * Ht:(t + 1) * Ht], w) for t in range(len(layer_ids))], 1)
    out.load_state_dict(state)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="models/treespark-target")
    ap.add_argument("--drafter", default="models/treespark-drafter")
    ap.add_argument("--tokenizer", default=None, help="folder with tokenizer.json (default: --target)")
    ap.add_argument("--width", type=int, default=2)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--noise", type=float, default=1e-3, help="relative noise on grown weights (0: exact copy)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out-target", default="work-data/grown-target")
    ap.add_argument("--out-drafter", default="work-data/grown-drafter")
    args = ap.parse_args()
    small = load_target(args.target).eval()
    big = grow(small, args.width, args.depth, args.noise, args.seed).eval()
    ids = torch.randint(0, small.c.vocab_size - 4, (2, 48), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ls, hs = small(ids, return_hidden=True)
        lb, hb = big(ids, return_hidden=True)
    rel = ((lb - ls).norm() / ls.norm()).item()
    L = small.c.num_hidden_layers - 1
    tap_rel = ((hb[args.depth * L + args.depth - 1][..., :small.c.hidden_size] - hs[L]).norm() / hs[L].norm()).item()
    n_small = sum(p.numel() for p in small.parameters())
    n_big = sum(p.numel() for p in big.parameters())
    print(f"grown {n_small / 1e6:.2f}M -> {n_big / 1e6:.2f}M parameters ({2 * n_big / 1e6:.1f} MB bf16); "
          f"logits relative difference {rel:.2e}, last tap {tap_rel:.2e} (noise {args.noise})", flush=True)
    if args.noise == 0 and rel > 1e-4:
        raise SystemExit(f"growth is not function-preserving: {rel}")
    with open(os.path.join(args.tokenizer or args.target, "tokenizer.json")) as f:
        tok_ids = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    export_target(big, args.tokenizer or args.target, args.out_target, tok_ids,
                  {"grown_from": os.path.basename(os.path.normpath(args.target)),
                   "width": str(args.width), "depth": str(args.depth), "noise": str(args.noise)})
    if args.drafter:
        dr = grow_drafter(load_drafter(args.drafter), args.width, args.depth, big.c.hidden_size)
        export_drafter(dr, args.out_drafter, {"grown_for": os.path.basename(os.path.normpath(args.out_target))})
        print(f"drafter taps {dr.c.target_layer_ids} over hidden {big.c.hidden_size}", flush=True)


if __name__ == "__main__":
    main()
