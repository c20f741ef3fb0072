"""Self-check of the Python reference and the committed goldens; needs no C++ engine.

    /usr/bin/python3 tools/py/check_reference.py [--golden tests/data/golden]

Checks (each prints PASS/FAIL; exit status 1 on any failure):
  safetensors   bf16 rounding on hand-picked bit patterns; F32/F16/BF16 round trips; header alignment
  goldens       every committed case reloads (single file and sharded) and recomputes to its golden.json;
                tied cases hold no lm_head.weight
  causality     logits of every prefix equal the first rows of the full-sequence logits
  incremental   a token-at-a-time forward with an explicit KV cache and per-head loops equals the batched one
  rope shift    shifting every position by a constant changes nothing (RoPE is relative)
  gqa           a GQA model equals the MHA model made by copying each kv head to its query heads
  drafter       permuting ctx rows (with their positions) leaves U unchanged; shifting all positions leaves U
                unchanged; row 0 depends on later block rows (non-causal); conditionals match the formula
  discriminate  plausible implementation mistakes (kv head h % n_kv, interleaved RoPE, causal drafter block,
                ctx normed by input_layernorm, RoPE scaling ignored, the drafter's base read as 10000) move the
                goldens by far more than any test tolerance
"""
import argparse
import copy
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_drafter as rd  # noqa: E402
import reference_model as rm  # noqa: E402
from safetensors_io import read_checkpoint, read_header, read_safetensors, write_safetensors  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F64 = torch.float64
failures = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}")
    if not ok:
        failures.append(name)


def maxdiff(a, b):
    return (torch.as_tensor(a, dtype=F64) - torch.as_tensor(b, dtype=F64)).abs().max().item()


# ---------------------------------------------------------------- safetensors

def check_safetensors():
    # f32 bit pattern -> expected bf16 bits under round-to-nearest-even.
    cases = {0x3F800000: 0x3F80, 0x3F808000: 0x3F80,  # exact tie, even below -> stays
             0x3F818000: 0x3F82,  # exact tie, odd below -> rounds up to even
             0x3F808001: 0x3F81, 0x3F807FFF: 0x3F80, 0xBF818000: 0xBF82, 0x7F7FFFFF: 0x7F80}  # last: overflow->inf
    bits = np.array(list(cases), dtype=np.uint32)
    f32 = torch.from_numpy(bits.view(np.float32).copy())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        write_safetensors(path, {"b": (f32, "BF16")})
        _, _, start = read_header(path)
        raw = open(path, "rb").read()[start:]
        got = list(struct.unpack(f"<{len(cases)}H", raw))
        check("safetensors bf16 round-to-nearest-even", got == list(cases.values()),
              f"got {[hex(g) for g in got]}")
        gen = torch.Generator().manual_seed(7)
        t = torch.randn(3, 5, 7, generator=gen)
        write_safetensors(path, {"a.f32": (t, "F32"), "b.f16": (t, "F16"), "c.bf16": (t, "BF16"),
                                 "d.scalar": (torch.tensor([2.5]), "F32")}, metadata={"format": "pt"})
        back, dtypes = read_safetensors(path)
        header, meta, start = read_header(path)
        check("safetensors round trips",
              torch.equal(back["a.f32"], t) and torch.equal(back["b.f16"], t.half().float())
              and torch.equal(back["c.bf16"], t.bfloat16().float()) and dtypes["c.bf16"] == "BF16"
              and meta == {"format": "pt"} and start % 8 == 0 and list(back["a.f32"].shape) == [3, 5, 7])


# ---------------------------------------------------------------- target model

def check_golden_models(root):
    cases = sorted(d for d in os.listdir(root) if not d.startswith("drafter_"))
    models = {}
    for case in cases:
        folder = os.path.join(root, case)
        cfg, w = rm.load_model(folder)
        g = json.load(open(os.path.join(folder, "golden.json")))
        logits, hidden = rm.forward(cfg, w, g["input_ids"], positions=g.get("positions"))
        scale = torch.as_tensor(g["logits"]).abs().max().item()
        d_logits = maxdiff(logits, g["logits"]) / scale
        d_hidden = max(maxdiff(hidden[l], g["hidden"][i]) / max(1.0, hidden[l].abs().max().item())
                       for i, l in enumerate(g["hidden_layers"]))
        _, dtypes = read_checkpoint(folder)
        dtype_ok = set(dtypes.values()) == {g["weights_dtype"]}
        tied_ok = ("lm_head.weight" not in w) == cfg.tied
        check(f"golden {case} recomputes", d_logits < 1e-8 and d_hidden < 1e-8 and dtype_ok and tied_ok,
              f"rel logits {d_logits:.1e} hidden {d_hidden:.1e} dtype {sorted(set(dtypes.values()))} tied {cfg.tied}")
        models[case] = (cfg, w, g["input_ids"], logits, g.get("positions"))
    return models


def incremental_forward(cfg, w, ids):
    """Second implementation: one token at a time, explicit KV cache, per-head loops, scalar softmax."""
    k_cache = [[] for _ in range(cfg.n_layers)]  # [layer][t] -> [n_kv, hd]
    v_cache = [[] for _ in range(cfg.n_layers)]
    rows = []
    head = w["model.embed_tokens.weight"] if cfg.tied else w["lm_head.weight"]
    group = cfg.n_heads // cfg.n_kv
    for t, tok in enumerate(ids):
        x = w["model.embed_tokens.weight"][tok].clone()  # [H]
        cos, sin = rm.rope_cos_sin(torch.tensor([t]), cfg.head_dim, cfg.rope)
        for l in range(cfg.n_layers):
            p = f"model.layers.{l}."
            h = rm.rms_norm(x, w[p + "input_layernorm.weight"], cfg.eps)
            q, k, v = (w[p + f"self_attn.{n}_proj.weight"] @ h for n in "qkv")
            if cfg.qkv_bias:
                q, k, v = (a + w[p + f"self_attn.{n}_proj.bias"] for a, n in zip((q, k, v), "qkv"))
            q = q.view(1, cfg.n_heads, cfg.head_dim)
            k = k.view(1, cfg.n_kv, cfg.head_dim)
            if cfg.qk_norm:
                q = rm.rms_norm(q, w[p + "self_attn.q_norm.weight"], cfg.eps)
                k = rm.rms_norm(k, w[p + "self_attn.k_norm.weight"], cfg.eps)
            q, k = rm.apply_rope(q, cos, sin)[0], rm.apply_rope(k, cos, sin)[0]
            k_cache[l].append(k)
            v_cache[l].append(v.view(cfg.n_kv, cfg.head_dim))
            out = []
            for hh in range(cfg.n_heads):
                kv = hh // group
                scores = [float(q[hh] @ kc[kv]) / math.sqrt(cfg.head_dim) for kc in k_cache[l]]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                out.append(sum(ei / sum(e) * vc[kv] for ei, vc in zip(e, v_cache[l])))
            x = x + w[p + "self_attn.o_proj.weight"] @ torch.cat(out)
            h = rm.rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.eps)
            g, u = w[p + "mlp.gate_proj.weight"] @ h, w[p + "mlp.up_proj.weight"] @ h
            x = x + w[p + "mlp.down_proj.weight"] @ (g / (1 + torch.exp(-g)) * u)
        rows.append(head @ rm.rms_norm(x, w["model.norm.weight"], cfg.eps))
    return torch.stack(rows)


def to_mha(cfg, w):
    """Copy every kv head to the query heads that read it: a plain MHA model that must equal the GQA one."""
    group = cfg.n_heads // cfg.n_kv
    cfg2, w2 = copy.copy(cfg), dict(w)
    cfg2.n_kv = cfg.n_heads
    for l in range(cfg.n_layers):
        for n in ("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias"):
            name = f"model.layers.{l}.self_attn.{n}"
            if name in w:
                per_head = w[name].view(cfg.n_kv, cfg.head_dim, *w[name].shape[1:])
                w2[name] = per_head.repeat_interleave(group, dim=0).reshape(cfg.n_heads * cfg.head_dim,
                                                                            *w[name].shape[1:])
    return cfg2, w2


def check_model_invariants(models):
    for case, (cfg, w, ids, logits, positions) in models.items():
        if positions is not None:  # spread positions: only the shift invariance applies (scaled RoPE is relative too)
            d_shift = maxdiff(rm.forward(cfg, w, ids, positions=positions, position_offset=17)[0], logits)
            check(f"rope shift {case}", d_shift < 1e-8, f"max diff {d_shift:.1e}")
            continue
        d_prefix = max(maxdiff(rm.forward(cfg, w, ids[:k])[0], logits[:k]) for k in (1, 3, len(ids) - 1))
        check(f"causality {case}", d_prefix < 1e-10, f"max diff {d_prefix:.1e}")
        d_shift = maxdiff(rm.forward(cfg, w, ids, position_offset=17)[0], logits)
        check(f"rope shift {case}", d_shift < 1e-9, f"max diff {d_shift:.1e}")
        if case in ("qwen3_gqa_f32", "qwen2_f32", "llama_bf16"):
            d_inc = maxdiff(incremental_forward(cfg, w, ids), logits)
            check(f"incremental {case}", d_inc < 1e-9, f"max diff {d_inc:.1e}")
        if cfg.n_kv != cfg.n_heads:
            d_gqa = maxdiff(rm.forward(*to_mha(cfg, w), ids)[0], logits)
            check(f"gqa == expanded mha {case}", d_gqa < 1e-10, f"max diff {d_gqa:.1e}")


# ---------------------------------------------------------------- drafter

def check_drafters(root):
    drafters = {}
    for case in sorted(d for d in os.listdir(root) if d.startswith("drafter_")):
        folder = os.path.join(root, case)
        g = json.load(open(os.path.join(folder, "golden.json")))
        cfg, w = rd.load_drafter(folder, g["target_hidden_size"])
        th = torch.tensor(g["target_hidden"], dtype=F64)
        U = rd.block_logits(cfg, w, th, g["anchor"])
        n_ctx = g["n_ctx"]
        d_golden = maxdiff(U, g["U"]) / U.abs().max().item()
        d_cond = max(maxdiff(rd.markov_logits(cfg, w, U, c["depth"], c["parent"]), c["logits"])
                     for c in g["conditionals"])
        first = g["conditionals"][0]
        formula = U[0] + (w["markov_head.markov_w2.weight"] @ w["markov_head.markov_w1.weight"][g["anchor"]]
                          if cfg.rank > 0 else 0)
        check(f"golden {case} recomputes", d_golden < 1e-8 and d_cond < 1e-6 and th.shape[0] == n_ctx
              and first["depth"] == 1 and first["parent"] == g["anchor"] and maxdiff(formula, first["logits"]) < 1e-6,
              f"rel U {d_golden:.1e} conditionals {d_cond:.1e}")
        perm = torch.randperm(n_ctx, generator=torch.Generator().manual_seed(3))
        d_perm = maxdiff(rd.block_logits(cfg, w, th[perm], g["anchor"], ctx_positions=perm), U)
        check(f"drafter ctx permutation {case}", d_perm < 1e-10, f"max diff {d_perm:.1e}")
        d_shift = maxdiff(rd.block_logits(cfg, w, th, g["anchor"], ctx_positions=torch.arange(n_ctx) + 40,
                                          block_start=n_ctx + 40), U)
        check(f"drafter rope shift {case}", d_shift < 1e-9, f"max diff {d_shift:.1e}")
        short = copy.copy(cfg)
        short.block_size = cfg.block_size - 1
        d_noncausal = maxdiff(rd.block_logits(short, w, th, g["anchor"])[0], U[0])
        check(f"drafter row 0 sees later block rows {case}", d_noncausal > 1e-3, f"diff {d_noncausal:.2f}")
        drafters[case] = (cfg, w, th, g["anchor"], U)
    return drafters


# ---------------------------------------------------------------- negative controls

def check_discrimination(models, drafters):
    """Mistakes an implementation could make must move the goldens far beyond test tolerances (say 1e-2)."""
    real_attention, real_rope, real_layer = rm.attention, rm.apply_rope, rd.drafter_layer

    def attention_modulo(q, k, v, allowed):  # query head h reads kv head h % n_kv instead of h // group
        idx = torch.arange(q.shape[1]) % k.shape[1]
        return real_attention(q, k[:, idx], v[:, idx], allowed)

    def rope_interleaved(x, cos, sin):  # GPT-J pairs (0,1),(2,3).. instead of rotate-half
        half = x.shape[-1] // 2
        c, s = cos[:, None, :half].repeat_interleave(2, -1), sin[:, None, :half].repeat_interleave(2, -1)
        rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        return x * c + rot * s

    def attention_causal_block(q, k, v, allowed):  # drafter block treated causally
        B, Tk = q.shape[0], k.shape[0]
        mask = allowed.clone()
        mask[:, Tk - B:] &= torch.ones(B, B, dtype=torch.bool).tril()
        return real_attention(q, k, v, mask)

    def layer_with_normed_ctx(cfg, w, l, x, ctx, *rope):  # ctx passed through the layer's input_layernorm
        return real_layer(cfg, w, l, x, rm.rms_norm(ctx, w[f"layers.{l}.input_layernorm.weight"], cfg.eps), *rope)

    cfg, w, ids, logits, _ = models["qwen3_gqa_f32"]
    for label, mod, attr, fake in (("kv head h % n_kv", rm, "attention", attention_modulo),
                                   ("interleaved rope", rm, "apply_rope", rope_interleaved)):
        setattr(mod, attr, fake)
        try:
            d = maxdiff(rm.forward(cfg, w, ids)[0], logits)
        finally:
            setattr(mod, attr, {"attention": real_attention, "apply_rope": real_rope}[attr])
        check(f"discriminates {label} (qwen3_gqa_f32)", d > 0.05, f"logits move {d:.2f}")

    # Ignoring the RoPE scaling (plain RoPE of the same base) must move every scaled case.
    for case, (cfg, w, ids, logits, positions) in models.items():
        if cfg.rope.type == "default":
            continue
        plain = copy.copy(cfg)
        plain.rope = rm.Rope({"rope_theta": cfg.rope.theta})
        d = maxdiff(rm.forward(plain, w, ids, positions=positions)[0], logits)
        check(f"discriminates ignored {cfg.rope.type} scaling ({case})", d > 0.05, f"logits move {d:.2f}")
    for case, (dcfg, dw, th, anchor, U) in drafters.items():
        if dcfg.rope.theta != 10000.0:  # the old silent default base
            wrong = copy.copy(dcfg)
            wrong.rope = rm.Rope({"rope_theta": 10000.0})
            d = maxdiff(rd.block_logits(wrong, dw, th, anchor), U)
            check(f"discriminates rope_theta 1e4 for {dcfg.rope.theta:g} ({case})", d > 0.05, f"U moves {d:.2f}")
    for case, (dcfg, dw, th, anchor, U) in drafters.items():
        rd.attention = attention_causal_block
        try:
            d = maxdiff(rd.block_logits(dcfg, dw, th, anchor), U)
        finally:
            rd.attention = real_attention
        check(f"discriminates causal block ({case})", d > 0.05, f"U moves {d:.2f}")
        rd.drafter_layer = layer_with_normed_ctx
        try:
            d = maxdiff(rd.block_logits(dcfg, dw, th, anchor), U)
        finally:
            rd.drafter_layer = real_layer
        check(f"discriminates ctx normed by input_layernorm ({case})", d > 0.05, f"U moves {d:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", default=os.path.join(REPO, "tests", "data", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    check_safetensors()
    models = check_golden_models(args.golden)
    check_model_invariants(models)
    drafters = check_drafters(args.golden)
    check_discrimination(models, drafters)
    print(f"\n{len(failures)} failure(s)" + (f": {failures}" if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
