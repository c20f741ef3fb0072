"""Float64 reference of the decoder LMs treespark runs (Hugging Face semantics), written from the architecture
description, not from the C++ code, so that goldens made with it are an independent check.

Supported `architectures[0]`:
  Qwen3ForCausalLM  q/k RMSNorm per head (before RoPE), no biases
  Qwen2ForCausalLM  q/k/v projections have biases, no q/k norm
  LlamaForCausalLM  no biases, no q/k norm
All three: pre-norm decoder, SwiGLU MLP, rotate-half RoPE, GQA, optional tied embeddings.

    cfg, w = load_model(folder)
    logits, hidden = forward(cfg, w, input_ids)   # logits [T, V]; hidden[l] = output of layer l, [T, H]
"""
import json
import math
import os

import torch

from safetensors_io import read_checkpoint

F64 = torch.float64
ARCHS = ("Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM")


# ---------------------------------------------------------------- shared building blocks (also used by the drafter)

def rms_norm(x, weight, eps):
    """x [..., D] -> x / sqrt(mean(x^2) + eps) * weight."""
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def rope_cos_sin(positions, head_dim, theta):
    """positions [T] -> cos, sin [T, head_dim] for rotate-half RoPE; inv_freq_i = theta^(-2i/head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=F64) / head_dim))  # [head_dim/2]
    freqs = positions.to(F64)[:, None] * inv_freq[None, :]  # [T, head_dim/2]
    angles = torch.cat([freqs, freqs], dim=-1)  # [T, head_dim]
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x [T, heads, head_dim]; rotate_half(x) = cat(-x2, x1) with x1, x2 the two halves of head_dim."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # [T, heads, head_dim]
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def attention(q, k, v, allowed):
    """Softmax attention with GQA.

    q [Tq, n_heads, hd]; k, v [Tk, n_kv, hd]; allowed [Tq, Tk] bool. Query head h reads kv head h // (n_heads/n_kv).
    Returns [Tq, n_heads * hd].
    """
    n_heads, n_kv, hd = q.shape[1], k.shape[1], q.shape[2]
    if n_heads % n_kv != 0:
        raise ValueError(f"num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    kv_of_head = torch.arange(n_heads) // (n_heads // n_kv)  # [n_heads]
    k_rep, v_rep = k[:, kv_of_head], v[:, kv_of_head]  # [Tk, n_heads, hd]
    scores = torch.einsum("qhd,khd->hqk", q, k_rep) / math.sqrt(hd)  # [n_heads, Tq, Tk]
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # [n_heads, Tq, Tk]
    out = torch.einsum("hqk,khd->qhd", probs, v_rep)  # [Tq, n_heads, hd]
    return out.reshape(q.shape[0], n_heads * hd)


def swiglu_mlp(x, gate_w, up_w, down_w):
    """x [T, H] -> down(silu(gate(x)) * up(x)) [T, H]."""
    return (torch.nn.functional.silu(x @ gate_w.T) * (x @ up_w.T)) @ down_w.T


# ---------------------------------------------------------------- config and weights

class ModelConfig:
    def __init__(self, d):
        self.arch = d["architectures"][0]
        if self.arch not in ARCHS:
            raise ValueError(f"architecture {self.arch!r} not supported; expected one of {ARCHS}")
        self.hidden = d["hidden_size"]
        self.intermediate = d["intermediate_size"]
        self.n_layers = d["num_hidden_layers"]
        self.n_heads = d["num_attention_heads"]
        self.n_kv = d.get("num_key_value_heads", self.n_heads)
        # Qwen3 decouples head_dim from hidden/heads; Llama/Qwen2 default to hidden/heads when absent.
        self.head_dim = d.get("head_dim") or self.hidden // self.n_heads
        self.eps = d["rms_norm_eps"]
        self.theta = d.get("rope_theta", 10000.0)
        self.vocab = d["vocab_size"]
        self.tied = d.get("tie_word_embeddings", False)
        self.qk_norm = self.arch == "Qwen3ForCausalLM"
        self.qkv_bias = self.arch == "Qwen2ForCausalLM"


def expected_shapes(cfg):
    """{tensor name: shape} a checkpoint of this config must hold, exactly."""
    H, I, hd, V = cfg.hidden, cfg.intermediate, cfg.head_dim, cfg.vocab
    q_out, kv_out = cfg.n_heads * hd, cfg.n_kv * hd
    shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    if not cfg.tied:
        shapes["lm_head.weight"] = [V, H]
    for l in range(cfg.n_layers):
        p = f"model.layers.{l}."
        shapes.update({
            p + "self_attn.q_proj.weight": [q_out, H], p + "self_attn.k_proj.weight": [kv_out, H],
            p + "self_attn.v_proj.weight": [kv_out, H], p + "self_attn.o_proj.weight": [H, q_out],
            p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H], p + "mlp.down_proj.weight": [H, I],
            p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
        })
        if cfg.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = [hd]
            shapes[p + "self_attn.k_norm.weight"] = [hd]
        if cfg.qkv_bias:
            shapes[p + "self_attn.q_proj.bias"] = [q_out]
            shapes[p + "self_attn.k_proj.bias"] = [kv_out]
            shapes[p + "self_attn.v_proj.bias"] = [kv_out]
    return shapes


def check_weights(shapes, weights):
    """Every expected tensor present with its shape, nothing extra."""
    missing = sorted(set(shapes) - set(weights))
    extra = sorted(set(weights) - set(shapes))
    if missing or extra:
        raise ValueError(f"checkpoint tensors differ from the config: missing {missing}, unexpected {extra}")
    for name, shape in shapes.items():
        if list(weights[name].shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, found {list(weights[name].shape)}")


def load_model(folder):
    """config.json + model.safetensors (or sharded index) -> (ModelConfig, {name: f64 tensor})."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = ModelConfig(json.load(f))
    tensors, _ = read_checkpoint(folder)
    weights = {name: t.to(F64) for name, t in tensors.items()}
    check_weights(expected_shapes(cfg), weights)
    return cfg, weights


# ---------------------------------------------------------------- forward pass

def decoder_layer(cfg, w, l, x, cos, sin, allowed):
    """One pre-norm decoder layer. x [T, H] -> [T, H]."""
    p = f"model.layers.{l}."
    T = x.shape[0]
    h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.eps)  # [T, H]
    q = h @ w[p + "self_attn.q_proj.weight"].T  # [T, n_heads*hd]
    k = h @ w[p + "self_attn.k_proj.weight"].T  # [T, n_kv*hd]
    v = h @ w[p + "self_attn.v_proj.weight"].T  # [T, n_kv*hd]
    if cfg.qkv_bias:
        q = q + w[p + "self_attn.q_proj.bias"]
        k = k + w[p + "self_attn.k_proj.bias"]
        v = v + w[p + "self_attn.v_proj.bias"]
    q = q.view(T, cfg.n_heads, cfg.head_dim)
    k = k.view(T, cfg.n_kv, cfg.head_dim)
    v = v.view(T, cfg.n_kv, cfg.head_dim)
    if cfg.qk_norm:  # Qwen3: RMSNorm over head_dim of every head, before RoPE
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], cfg.eps)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], cfg.eps)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    x = x + attention(q, k, v, allowed) @ w[p + "self_attn.o_proj.weight"].T
    h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.eps)
    return x + swiglu_mlp(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])


def forward(cfg, w, input_ids, position_offset=0):
    """input_ids [T] -> (logits [T, V], [hidden after layer l, [T, H]] for l in 0..L-1).

    position_offset shifts every position (used only by the self-check: RoPE makes the result shift-invariant).
    """
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    T = ids.shape[0]
    if ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"token ids must lie in [0, {cfg.vocab}); found [{int(ids.min())}, {int(ids.max())}]")
    x = w["model.embed_tokens.weight"][ids]  # [T, H]
    cos, sin = rope_cos_sin(torch.arange(T) + position_offset, cfg.head_dim, cfg.theta)  # [T, hd]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # causal: row i sees columns 0..i
    hidden = []
    for l in range(cfg.n_layers):
        x = decoder_layer(cfg, w, l, x, cos, sin, allowed)
        hidden.append(x)
    head = w["model.embed_tokens.weight"] if cfg.tied else w["lm_head.weight"]  # [V, H]
    logits = rms_norm(x, w["model.norm.weight"], cfg.eps) @ head.T  # [T, V]
    return logits, hidden
