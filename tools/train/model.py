"""PyTorch modules of the shipped pair: a Qwen3-architecture target and a DSpark-layout block drafter.

Parameter names equal the Hugging Face tensor names minus nothing but the "model." prefix of the target, so
export.py only renames that prefix. Norms and softmax run in fp32 even under bf16 autocast.
"""
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TargetConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 1024


@dataclass
class DrafterConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    block_size: int = 8
    markov_rank: int = 64
    target_layer_ids: list = field(default_factory=lambda: [0, 2, 3])
    target_hidden_size: int = 256
    mask_token_id: int = 4095


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_cos_sin(positions, head_dim, theta):
    """positions [...] -> cos, sin [..., head_dim] (rotate-half layout: frequencies repeated twice)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    ang = positions.float()[..., None] * inv  # [..., hd/2]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """x [..., T, heads, hd]; cos/sin broadcastable to [..., T, 1, hd]."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, c.rms_norm_eps)

    def forward(self, q_in, kv_in, q_rope, k_rope, allowed):
        """q_in [N, Tq, H], kv_in [N, Tk, H]; *_rope = (cos, sin) [N or 1, T, hd]; allowed [N or 1, Tq, Tk] bool."""
        N, Tq, _ = q_in.shape
        Tk = kv_in.shape[1]
        q = self.q_norm(self.q_proj(q_in).view(N, Tq, self.nh, self.hd))
        k = self.k_norm(self.k_proj(kv_in).view(N, Tk, self.nkv, self.hd))
        v = self.v_proj(kv_in).view(N, Tk, self.nkv, self.hd)
        q = apply_rope(q, q_rope[0][:, :, None], q_rope[1][:, :, None])
        k = apply_rope(k, k_rope[0][:, :, None], k_rope[1][:, :, None])
        rep = self.nh // self.nkv  # GQA: query head h reads kv head h // rep
        q = q.transpose(1, 2)  # [N, nh, Tq, hd]
        k = k.transpose(1, 2).repeat_interleave(rep, dim=1)  # [N, nh, Tk, hd]
        v = v.transpose(1, 2).repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(self.hd)  # [N, nh, Tq, Tk]
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        out = torch.softmax(scores, dim=-1).to(v.dtype) @ v  # [N, nh, Tq, hd]
        return self.o_proj(out.transpose(1, 2).reshape(N, Tq, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)


def init_weights(module, n_layers):
    for name, p in module.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            nn.init.normal_(p, std=std)


class Target(nn.Module):
    """Qwen3ForCausalLM with tied embeddings; forward returns logits and, on request, every layer's output."""

    def __init__(self, c: TargetConfig):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        init_weights(self, c.num_hidden_layers)

    def forward(self, ids, return_hidden=False):
        """ids [N, T] -> logits [N, T, V] (+ list of layer outputs [N, T, H], residual stream before the norm)."""
        N, T = ids.shape
        pos = torch.arange(T, device=ids.device)[None]
        rope = rope_cos_sin(pos, self.c.head_dim, self.c.rope_theta)  # [1, T, hd]
        causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()[None]
        x = self.embed_tokens(ids)
        hidden = []
        for layer in self.layers:
            h = layer.input_layernorm(x)
            x = x + layer.self_attn(h, h, rope, rope, causal)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            hidden.append(x)
        logits = F.linear(self.norm(x), self.embed_tokens.weight)
        return (logits, hidden) if return_hidden else logits


class MarkovHead(nn.Module):
    def __init__(self, vocab, rank):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)  # [V, rank], exported as markov_w1.weight
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)  # weight [V, rank]
        nn.init.normal_(self.markov_w1.weight, std=0.02)
        nn.init.zeros_(self.markov_w2.weight)  # start as the plain block drafter

    def forward(self, prev):
        """prev [...] token ids -> Markov bias [..., V]."""
        return self.markov_w2(self.markov_w1(prev))


class Drafter(nn.Module):
    """DSpark block drafter. Semantics (must match the C++ engine): see train_drafter.py's module docstring."""

    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.fc = nn.Linear(len(c.target_layer_ids) * c.target_hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        init_weights(self, c.num_hidden_layers)
        self.markov_head = MarkovHead(c.vocab_size, c.markov_rank)

    def forward(self, taps, ids, anchors):
        """Base logits U of many anchors per sequence in one pass.

        taps [N, S, n_taps*Ht] target layer outputs; ids [N, S] tokens; anchors [N, A] positions (>= 1).
        Block of anchor a: [ids[a], mask x (B-1)] at positions a..a+B-1, attending (non-causally) to the context
        rows 0..a-1 and to its own B rows only. Returns U [N, A, B, V].
        """
        N, S, _ = taps.shape
        A, B = anchors.shape[1], self.c.block_size
        ctx = self.hidden_norm(self.fc(taps))  # [N, S, H]
        blk_ids = torch.full((N, A, B), self.c.mask_token_id, dtype=ids.dtype, device=ids.device)
        blk_ids[:, :, 0] = torch.gather(ids, 1, anchors)
        x = self.embed_tokens(blk_ids).view(N, A * B, -1)  # [N, A*B, H]
        blk_pos = (anchors[:, :, None] + torch.arange(B, device=ids.device)).view(N, A * B)  # [N, A*B]
        ctx_pos = torch.arange(S, device=ids.device)[None].expand(N, S)
        q_rope = rope_cos_sin(blk_pos, self.c.head_dim, self.c.rope_theta)  # [N, A*B, hd]
        k_rope = rope_cos_sin(torch.cat([ctx_pos, blk_pos], 1), self.c.head_dim, self.c.rope_theta)
        row_anchor = anchors[:, :, None].expand(N, A, B).reshape(N, A * B)  # [N, A*B]
        sees_ctx = ctx_pos[:, None, :] < row_anchor[:, :, None]  # [N, A*B, S]
        row_block = torch.arange(A, device=ids.device).repeat_interleave(B)  # [A*B]
        sees_blk = (row_block[:, None] == row_block[None, :])[None].expand(N, A * B, A * B)
        allowed = torch.cat([sees_ctx, sees_blk], dim=2)  # [N, A*B, S + A*B]
        for layer in self.layers:
            h = layer.input_layernorm(x)
            kv_in = torch.cat([ctx, h], dim=1)  # ctx enters un-normed, the same for every layer
            x = x + layer.self_attn(h, kv_in, q_rope, k_rope, allowed)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.lm_head(self.norm(x)).view(N, A, B, -1)


def config_dict(c):
    return asdict(c)
