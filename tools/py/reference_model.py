"""Float64 reference of the decoder LMs treespark runs (Hugging Face semantics), written from the architecture
description, not from the C++ code, so that goldens made with it are an independent check.

Supported `architectures[0]`:
  Qwen3ForCausalLM  q/k RMSNorm per head (before RoPE), no biases
  Qwen2ForCausalLM  q/k/v projections have biases, no q/k norm
  LlamaForCausalLM  no biases, no q/k norm
All three: pre-norm decoder, SwiGLU MLP, rotate-half RoPE (types default, linear, llama3, yarn, from either
config spelling; see Rope), GQA, optional tied embeddings.

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


class Rope:
    """RoPE of one config, from either spelling:
      transformers <= 4.x: top-level "rope_theta" and "rope_scaling" {"rope_type" or "type", "factor", ...}
      transformers v5:     "rope_parameters" {"rope_theta", "rope_type", "factor", ...}
    The base is required. Types: default, linear, llama3, yarn (others are refused by name).
    """

    TYPES = ("default", "linear", "llama3", "yarn")

    def __init__(self, d, max_position_embeddings=None):
        v5, legacy = d.get("rope_parameters"), d.get("rope_scaling")
        if v5 is not None:
            if legacy is not None:
                raise ValueError("config has both rope_parameters and rope_scaling")
            params = dict(v5)
            if params.get("rope_theta") is None:
                raise ValueError("missing RoPE base rope_parameters.rope_theta")
            self.theta = float(params["rope_theta"])
            if d.get("rope_theta") is not None and float(d["rope_theta"]) != self.theta:
                raise ValueError("rope_theta disagrees with rope_parameters.rope_theta")
        else:
            if d.get("rope_theta") is None:
                raise ValueError("missing RoPE base: no rope_theta and no rope_parameters")
            self.theta = float(d["rope_theta"])
            params = dict(legacy or {})
        self.type = params.get("rope_type") or params.get("type") or "default"
        if self.type not in self.TYPES:
            raise ValueError(f"unsupported RoPE type {self.type!r}; expected one of {self.TYPES}")
        self.params = params
        self.max_position_embeddings = max_position_embeddings

    def inv_freq_and_scale(self, head_dim):
        """-> (inv_freq [head_dim/2] float64, attention scale multiplying cos and sin)."""
        p, base = self.params, self.theta
        exponent = torch.arange(0, head_dim, 2, dtype=F64) / head_dim  # 2i / head_dim
        inv = base ** -exponent  # [head_dim/2], unscaled
        if self.type == "default":
            return inv, 1.0
        if self.type == "linear":  # positions divided by factor = frequencies divided by factor
            return inv / p["factor"], 1.0
        if self.type == "llama3":
            # Llama 3.1: wavelengths longer than original/low_freq_factor are stretched by `factor`, shorter than
            # original/high_freq_factor kept, in between blended linearly in original/wavelength.
            factor, lo, hi = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
            original = p["original_max_position_embeddings"]
            out = []
            for f in inv.tolist():
                wavelength = 2 * math.pi / f
                if wavelength < original / hi:
                    out.append(f)
                elif wavelength > original / lo:
                    out.append(f / factor)
                else:
                    smooth = (original / wavelength - lo) / (hi - lo)
                    out.append((1 - smooth) * f / factor + smooth * f)
            return torch.tensor(out, dtype=F64), 1.0
        # yarn (YaRN paper, NTK-by-parts): pair i gets weight r_i in [0, 1] on its interpolated (f / factor)
        # frequency and 1 - r_i on the original one; r ramps linearly across the pairs that turn between beta_fast
        # and beta_slow times over the original context.
        original = p.get("original_max_position_embeddings") or self.max_position_embeddings
        factor = p.get("factor")
        if factor is None:
            factor = self.max_position_embeddings / original
        beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

        def pair_dim(rotations):  # solves original * inv_freq(d) / (2 pi) = rotations for the dimension d
            return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = pair_dim(beta_fast), pair_dim(beta_slow)
        if p.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, head_dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(head_dim // 2, dtype=F64) - lo) / (hi - lo)).clamp(0, 1)  # [head_dim/2]
        inv_yarn = (inv / factor) * ramp + inv * (1 - ramp)

        def mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        scale = p.get("attention_factor")
        if scale is None:
            if p.get("mscale") and p.get("mscale_all_dim"):
                scale = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
            else:
                scale = mscale(factor)
        return inv_yarn, float(scale)


def rope_cos_sin(positions, head_dim, rope):
    """positions [T] -> cos, sin [T, head_dim] for rotate-half RoPE, both times the attention scale.

    rope: a Rope, or a number (the base of unscaled RoPE)."""
    if not isinstance(rope, Rope):
        rope = Rope({"rope_theta": rope})
    inv_freq, scale = rope.inv_freq_and_scale(head_dim)  # [head_dim/2]
    freqs = torch.as_tensor(positions).to(F64)[:, None] * inv_freq[None, :]  # [T, head_dim/2]
    angles = torch.cat([freqs, freqs], dim=-1)  # [T, head_dim]
    return angles.cos() * scale, angles.sin() * scale


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
        self.max_positions = d.get("max_position_embeddings", 32768)
        self.rope = Rope(d, self.max_positions)
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


def forward(cfg, w, input_ids, position_offset=0, positions=None):
    """input_ids [T] -> (logits [T, V], [hidden after layer l, [T, H]] for l in 0..L-1).

    positions [T] (increasing; default 0..T-1) are the RoPE positions; rows attend causally in row order.
    position_offset shifts every position (used only by the self-check: RoPE makes the result shift-invariant).
    """
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    T = ids.shape[0]
    if ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"token ids must lie in [0, {cfg.vocab}); found [{int(ids.min())}, {int(ids.max())}]")
    x = w["model.embed_tokens.weight"][ids]  # [T, H]
    positions = torch.arange(T) if positions is None else torch.as_tensor(positions)
    if positions.shape != (T,) or int(positions.max()) >= cfg.max_positions:
        raise ValueError(f"need {T} positions below max_position_embeddings {cfg.max_positions}")
    cos, sin = rope_cos_sin(positions + position_offset, cfg.head_dim, cfg.rope)  # [T, hd]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # causal: row i sees columns 0..i
    hidden = []
    for l in range(cfg.n_layers):
        x = decoder_layer(cfg, w, l, x, cos, sin, allowed)
        hidden.append(x)
    head = w["model.embed_tokens.weight"] if cfg.tied else w["lm_head.weight"]  # [V, H]
    logits = rms_norm(x, w["model.norm.weight"], cfg.eps) @ head.T  # [T, V]
    return logits, hidden
