"""Float64 reference of the DSpark block drafter, written from its description (independent of the C++ code).

One drafting step, given the anchor (the last committed token) and the target's hidden states of the committed
tokens before it:
  ctx  = hidden_norm(fc(concat_l target_layer_l(token)))            [n_ctx, H], positions 0..n_ctx-1
  x    = embed_tokens([anchor, mask x (block_size-1)])               [B, H],     positions n_ctx..n_ctx+B-1
  per layer: h = input_layernorm(x); q = q_proj(h); k, v = k/v_proj(concat(ctx, h))  (ctx is not normed here
             and is the same for every layer); q_norm/k_norm per head, RoPE by position; NON-causal attention
             (every block row sees every ctx row and every block row); x += o_proj(attn); x += mlp(post_norm(x))
  U    = lm_head(norm(x))                                            [B, V]; row k scores the token k+1 after
                                                                                the anchor
Markov conditional logits of a child at depth d (1-based) whose parent token is t: U[d-1] + W2 @ W1[t], with
W1 = markov_head.markov_w1.weight [V, rank], W2 = markov_head.markov_w2.weight [V, rank]. Depth-1 children have
the anchor as parent. markov_head_type must be "vanilla" (or absent). A drafter with markov_rank 0 (or absent) has
no Markov head and no markov tensors: its conditionals are U[d-1].

The tap width is len(target_layer_ids) * the hidden size of the target the drafter is paired with (published
configs carry no target_hidden_size; when one is present it must agree). RoPE: rope_theta / rope_scaling or
transformers v5 rope_parameters, as for targets (reference_model.Rope).

    cfg, w = load_drafter(folder, target_hidden_size)
    U = block_logits(cfg, w, target_hidden, anchor)          # [B, V]
    markov_logits(cfg, w, U, depth, parent)                  # [V]
"""
import json
import os

import torch

from reference_model import F64, Rope, apply_rope, attention, check_weights, rms_norm, rope_cos_sin, swiglu_mlp
from safetensors_io import read_checkpoint


class DrafterConfig:
    def __init__(self, d, target_hidden_size):
        arch = d.get("architectures", ["?"])[0]
        if arch != "DSparkDrafter":
            raise ValueError(f"drafter architecture {arch!r}; expected 'DSparkDrafter'")
        head_type = d.get("markov_head_type") or "vanilla"
        if head_type != "vanilla":
            raise ValueError(f"markov_head_type {head_type!r} not supported (only 'vanilla')")
        self.block_size = d["block_size"]
        self.rank = d.get("markov_rank") or 0
        self.target_layer_ids = list(d["target_layer_ids"])
        self.mask_token_id = d["mask_token_id"]
        self.n_layers = d["num_hidden_layers"]
        self.hidden = d["hidden_size"]
        self.head_dim = d["head_dim"]
        self.n_heads = d["num_attention_heads"]
        self.n_kv = d["num_key_value_heads"]
        self.intermediate = d["intermediate_size"]
        self.eps = d["rms_norm_eps"]
        self.rope = Rope(d, d.get("max_position_embeddings"))
        self.vocab = d["vocab_size"]
        if d.get("target_hidden_size") not in (None, target_hidden_size):
            raise ValueError(f"target_hidden_size {d['target_hidden_size']} != the target's {target_hidden_size}")
        self.target_hidden = target_hidden_size
        self.fc_in = len(self.target_layer_ids) * self.target_hidden


def expected_shapes(cfg):
    H, I, hd, V = cfg.hidden, cfg.intermediate, cfg.head_dim, cfg.vocab
    q_out, kv_out = cfg.n_heads * hd, cfg.n_kv * hd
    shapes = {
        "embed_tokens.weight": [V, H], "fc.weight": [H, cfg.fc_in], "hidden_norm.weight": [H],
        "norm.weight": [H], "lm_head.weight": [V, H],
    }
    if cfg.rank > 0:
        shapes["markov_head.markov_w1.weight"] = [V, cfg.rank]
        shapes["markov_head.markov_w2.weight"] = [V, cfg.rank]
    for l in range(cfg.n_layers):
        p = f"layers.{l}."
        shapes.update({
            p + "self_attn.q_proj.weight": [q_out, H], p + "self_attn.k_proj.weight": [kv_out, H],
            p + "self_attn.v_proj.weight": [kv_out, H], p + "self_attn.o_proj.weight": [H, q_out],
            p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
            p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H], p + "mlp.down_proj.weight": [H, I],
            p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
        })
    return shapes


def load_drafter(folder, target_hidden_size):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = DrafterConfig(json.load(f), target_hidden_size)
    tensors, _ = read_checkpoint(folder)
    weights = {name: t.to(F64) for name, t in tensors.items()}
    check_weights(expected_shapes(cfg), weights)
    return cfg, weights


def drafter_layer(cfg, w, l, x, ctx, cos_ctx, sin_ctx, cos_blk, sin_blk):
    """x [B, H] block rows, ctx [n_ctx, H] -> [B, H]."""
    p = f"layers.{l}."
    B, n_ctx = x.shape[0], ctx.shape[0]
    h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.eps)  # [B, H]
    kv_in = torch.cat([ctx, h], dim=0)  # [n_ctx + B, H]; ctx enters un-normed
    q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, cfg.n_heads, cfg.head_dim)
    k = (kv_in @ w[p + "self_attn.k_proj.weight"].T).view(n_ctx + B, cfg.n_kv, cfg.head_dim)
    v = (kv_in @ w[p + "self_attn.v_proj.weight"].T).view(n_ctx + B, cfg.n_kv, cfg.head_dim)
    q = rms_norm(q, w[p + "self_attn.q_norm.weight"], cfg.eps)
    k = rms_norm(k, w[p + "self_attn.k_norm.weight"], cfg.eps)
    q = apply_rope(q, cos_blk, sin_blk)
    k = apply_rope(k, torch.cat([cos_ctx, cos_blk]), torch.cat([sin_ctx, sin_blk]))
    allowed = torch.ones(B, n_ctx + B, dtype=torch.bool)  # non-causal: every row sees everything
    x = x + attention(q, k, v, allowed) @ w[p + "self_attn.o_proj.weight"].T
    h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.eps)
    return x + swiglu_mlp(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])


def block_logits(cfg, w, target_hidden, anchor, ctx_positions=None, block_start=None):
    """target_hidden [n_ctx, n_taps*Ht] (tokens before the anchor), anchor id -> U [B, V].

    ctx_positions [n_ctx] defaults to 0..n_ctx-1 and block_start to n_ctx; the self-check overrides them to test
    permutation and shift invariance.
    """
    target_hidden = torch.as_tensor(target_hidden, dtype=F64)
    n_ctx = target_hidden.shape[0]
    if target_hidden.shape[1] != cfg.fc_in:
        raise ValueError(f"target_hidden has {target_hidden.shape[1]} columns; expected {cfg.fc_in} "
                         f"({len(cfg.target_layer_ids)} taps x {cfg.target_hidden})")
    if ctx_positions is None:
        ctx_positions = torch.arange(n_ctx)
    if block_start is None:
        block_start = n_ctx
    B = cfg.block_size
    ctx = rms_norm(target_hidden @ w["fc.weight"].T, w["hidden_norm.weight"], cfg.eps)  # [n_ctx, H]
    block_ids = torch.tensor([anchor] + [cfg.mask_token_id] * (B - 1))  # [B]
    x = w["embed_tokens.weight"][block_ids]  # [B, H]
    cos_ctx, sin_ctx = rope_cos_sin(torch.as_tensor(ctx_positions), cfg.head_dim, cfg.rope)  # [n_ctx, hd]
    cos_blk, sin_blk = rope_cos_sin(torch.arange(B) + block_start, cfg.head_dim, cfg.rope)  # [B, hd]
    for l in range(cfg.n_layers):
        x = drafter_layer(cfg, w, l, x, ctx, cos_ctx, sin_ctx, cos_blk, sin_blk)
    return rms_norm(x, w["norm.weight"], cfg.eps) @ w["lm_head.weight"].T  # [B, V]


def markov_logits(cfg, w, U, depth, parent):
    """Conditional logits [V] of a child at `depth` (1..block_size) whose parent token is `parent`."""
    if not 1 <= depth <= cfg.block_size:
        raise ValueError(f"depth {depth} outside 1..{cfg.block_size}")
    if cfg.rank == 0:  # no Markov head: the conditional is the base row
        return U[depth - 1].clone()
    w1_row = w["markov_head.markov_w1.weight"][parent]  # [rank]
    return U[depth - 1] + w["markov_head.markov_w2.weight"] @ w1_row  # [V]
