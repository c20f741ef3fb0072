"""Train the DSpark-layout block drafter against the frozen, exported target and export the drafter folder.

Forward semantics (the C++ engine implements the same; tools/train/check_export.py compares this batched
forward with the independent float64 reference tools/py/reference_drafter.py):
  target hidden of layer l = OUTPUT of decoder layer l (residual stream, before the final norm).
  For an anchor at position a (the last committed token) the context is positions 0..a-1:
    ctx = hidden_norm(fc(concat over target_layer_ids of the layer outputs)) [a, H]
  block input x = embed_tokens([token_a, mask x (B-1)]) at positions a..a+B-1; per layer:
    h = input_layernorm(x); q = q_proj(h); k, v = k/v_proj(concat(ctx, h)) (ctx un-normed, same for all layers);
    q_norm/k_norm per head, RoPE by position; NON-causal (every block row sees all ctx rows and block rows);
    x += o_proj(attn); x += down(silu(gate(h2)) * up(h2)), h2 = post_attention_layernorm(x)
  U = lm_head(norm(x)) [B, V]; row k predicts the token k+1 places after the anchor.
  Markov conditional of row k with previous token t (the token at a+k; the anchor for row 0):
    U[k] + markov_w2 @ markov_w1[t].

Training: each step takes N windows of the training stream, runs the target once (teacher forcing, no grad) for
its layer outputs and next-token distributions, samples A anchors per window (a quarter of them early, a <= 16,
because prompts are short) and runs one drafter pass over all N*A blocks (an attention mask gives each block
its own prefix). Loss per block row k, weighted by exp(-k/4) (early rows decide acceptance):
    KL(p_target(. | prefix up to a+k) || q_cond) + CE(q_cond, data token a+k+1) + 0.2 * CE(softmax U_k, data)
with q_cond the Markov conditional on the TRUE previous token; rows past the window end are masked.
With --distill-windows, a share of each step's windows (--distill-fraction) are the target's own continuations of
corpus prefixes (make_distill_windows.py): there the "data" tokens are what the target wrote, as the accepted
prefix of a round is at inference.

    /usr/bin/python3 tools/train/train_drafter.py --target models/treespark-target --out models/treespark-drafter
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from export import export_drafter, read_folder
from grow_target import load_drafter
import resumable
from model import Drafter, DrafterConfig, Target, TargetConfig, config_dict


def load_target(folder, device):
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    c = TargetConfig(**{k: hf[k] for k in TargetConfig.__dataclass_fields__})
    model = Target(c)
    w = read_folder(folder)  # the shipped bf16 values (one file or shards)
    model.load_state_dict({k[len("model."):]: v for k, v in w.items()})
    model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def sample_anchors(rng, n, a, seq):
    """[n, a] anchor positions in 1..seq-2; a quarter of them in 1..16."""
    late = rng.integers(1, seq - 1, size=(n, a))
    early = rng.integers(1, 17, size=(n, a))
    return np.where(rng.random((n, a)) < 0.25, early, late)


@torch.no_grad()
def teacher(target, ids, layer_ids):
    """ids [N, S] -> taps [N, S, n_taps*Ht] (fp32), target log-probs [N, S, V] (fp32)."""
    with torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16):
        logits, hidden = target(ids, return_hidden=True)
    taps = torch.cat([hidden[l].float() for l in layer_ids], dim=-1)
    return taps, torch.log_softmax(logits.float(), dim=-1)


def block_terms(drafter, target, ids, anchors, layer_ids):
    """One drafter pass -> dict of per-row tensors [N, A, B, ...] used by the loss and the metrics."""
    B = drafter.c.block_size
    N, S = ids.shape
    taps, logp = teacher(target, ids, layer_ids)
    with torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16):
        U = drafter(taps, ids, anchors).float()  # [N, A, B, V]
    pos = anchors[:, :, None] + torch.arange(B, device=ids.device)  # [N, A, B] position of each row's prev token
    valid = pos + 1 <= S - 1  # the row's data token a+k+1 exists inside the window
    pos_c = pos.clamp(max=S - 2)
    prev = torch.gather(ids, 1, pos_c.flatten(1)).view_as(pos)  # [N, A, B]
    nxt = torch.gather(ids, 1, (pos_c + 1).flatten(1)).view_as(pos)
    cond = U + drafter.markov_head(prev).float()  # [N, A, B, V]
    p_logp = torch.gather(logp, 1, pos_c.flatten(1)[:, :, None].expand(-1, -1, logp.shape[-1])).view(cond.shape)
    return {"U": U, "cond": cond, "target_logp": p_logp, "next": nxt, "valid": valid}


def loss_fn(t, B):
    w = torch.exp(-torch.arange(B, dtype=torch.float32) / 4.0).to(t["cond"].device)  # [B]
    logq = torch.log_softmax(t["cond"], dim=-1)
    kl = (t["target_logp"].exp() * (t["target_logp"] - logq)).sum(-1)  # [N, A, B]
    ce = F.cross_entropy(t["cond"].flatten(0, 2), t["next"].flatten(), reduction="none").view_as(kl)
    ce_u = F.cross_entropy(t["U"].flatten(0, 2), t["next"].flatten(), reduction="none").view_as(kl)
    m = t["valid"].float() * w
    return ((kl + ce + 0.2 * ce_u) * m).sum() / m.sum(), (kl * t["valid"]).sum() / t["valid"].sum()


@torch.no_grad()
def evaluate(drafter, target, tokens, layer_ids, seq, n_windows, n_anchors, seed, device):
    """Per block row: top-1 agreement of the conditional (true prev token) with the target's argmax, the
    target's argmax inside the conditional's top-4, the same for the marginal U, and 1 - TV (the T=1 acceptance
    probability of a single draft)."""
    drafter.eval()
    rng = np.random.default_rng(seed)
    B = drafter.c.block_size
    sums = {k: torch.zeros(B) for k in ("top1", "top4", "top1_marginal", "accept_t1", "count")}
    starts = rng.integers(0, len(tokens) - seq - 1, size=n_windows)
    for i in range(0, n_windows, 8):
        w = np.stack([tokens[s:s + seq] for s in starts[i:i + 8]]).astype(np.int64)
        ids = torch.from_numpy(w).to(device)
        anchors = torch.from_numpy(sample_anchors(rng, len(w), n_anchors, seq)).to(device)
        t = block_terms(drafter, target, ids, anchors, layer_ids)
        best = t["target_logp"].argmax(-1)  # [N, A, B]
        v = t["valid"].float()
        top4 = t["cond"].topk(4, dim=-1).indices
        q = torch.softmax(t["cond"], -1)
        tv = 0.5 * (q - t["target_logp"].exp()).abs().sum(-1)
        sums["top1"] += ((t["cond"].argmax(-1) == best).float() * v).sum((0, 1)).cpu()
        sums["top4"] += ((top4 == best[..., None]).any(-1).float() * v).sum((0, 1)).cpu()
        sums["top1_marginal"] += ((t["U"].argmax(-1) == best).float() * v).sum((0, 1)).cpu()
        sums["accept_t1"] += ((1 - tv) * v).sum((0, 1)).cpu()
        sums["count"] += v.sum((0, 1)).cpu()
    drafter.train()
    n = sums.pop("count")
    return {k: [round(x, 4) for x in (s / n).tolist()] for k, s in sums.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="work-data/corpus")
    ap.add_argument("--target", default="models/treespark-target")
    ap.add_argument("--out", default="models/treespark-drafter")
    ap.add_argument("--ckpt", default="work-data/drafter.pt")
    ap.add_argument("--device", default="cpu", help="cpu (documented) or cuda")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1 on a shared machine, see train_target)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=1126)
    ap.add_argument("--minutes", type=float, default=None, help="schedule over wall-clock time instead of --steps")
    ap.add_argument("--batch", type=int, default=6, help="windows per step")
    ap.add_argument("--anchors", type=int, default=32, help="anchors per window")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--taps", default=None, help="comma-separated target layers (default 0, L/2, L-1)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=96, help="validation windows of the final evaluation")
    ap.add_argument("--export-every-min", type=float, default=8.0)
    ap.add_argument("--init-from", default=None,
                    help="start from an exported drafter folder (e.g. grow_target.py's carried-along drafter); "
                         "its config gives the shape and taps")
    ap.add_argument("--resume", action="store_true",
                    help="go on from --ckpt if it holds a resumable state, with the same arguments")
    ap.add_argument("--ckpt-every-min", type=float, default=5.0, help="resumable checkpoint period")
    ap.add_argument("--distill-windows", nargs="+", default=None,
                    help="[n, seq] windows of the target's own continuations (make_distill_windows.py); several "
                         "files are used as one, in the order given")
    ap.add_argument("--distill-fraction", type=float, default=0.5,
                    help="share of each step's windows drawn from --distill-windows")
    args = ap.parse_args()

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_tok = np.load(os.path.join(args.data, "train.npy"))
    val_tok = np.load(os.path.join(args.data, "val.npy"))
    distill = None  # [n, seq] uint16, every file's windows in the order given
    if args.distill_windows:
        parts = [np.load(f) for f in args.distill_windows]
        for f, part in zip(args.distill_windows, parts):
            if part.ndim != 2 or part.shape[1] != args.seq:
                raise SystemExit(f"{f}: windows of shape {part.shape}, expected [n, {args.seq}] (--seq)")
        distill = np.concatenate(parts)
    n_distill = int(round(args.batch * args.distill_fraction)) if distill is not None else 0
    target = load_target(args.target, args.device)
    tc = target.c
    L = tc.num_hidden_layers
    taps = [int(x) for x in args.taps.split(",")] if args.taps else sorted({0, L // 2, L - 1})
    with open(os.path.join(args.target, "tokenizer.json")) as f:
        mask_id = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}["<|mask|>"]
    if args.init_from:
        drafter = load_drafter(args.init_from).to(args.device)
        dc = drafter.c
        taps = list(dc.target_layer_ids)
        if dc.target_hidden_size != tc.hidden_size or max(taps) >= L:
            raise SystemExit(f"{args.init_from} does not fit target {args.target}")
    else:
        dc = DrafterConfig(vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
                           num_hidden_layers=args.layers, num_attention_heads=tc.num_attention_heads,
                           num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim,
                           rms_norm_eps=tc.rms_norm_eps, rope_theta=tc.rope_theta, block_size=args.block,
                           markov_rank=args.rank, target_layer_ids=taps, target_hidden_size=tc.hidden_size,
                           mask_token_id=mask_id)
        drafter = Drafter(dc).to(args.device)
        with torch.no_grad():  # same width as the target: start from its (tied) embedding as input and output table
            drafter.embed_tokens.weight.copy_(target.embed_tokens.weight)
            drafter.lm_head.weight.copy_(target.embed_tokens.weight)
    n_params = sum(p.numel() for p in drafter.parameters())
    print(f"drafter {config_dict(dc)}: {n_params / 1e6:.2f}M parameters", flush=True)
    decay = [p for p in drafter.parameters() if p.dim() == 2]
    no_decay = [p for p in drafter.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    step, windows, log, done_s = 0, 0, [], 0.0  # done_s: training seconds of earlier runs of a resumed schedule
    if args.resume and os.path.exists(args.ckpt):
        ck = resumable.load(args.ckpt, drafter, opt, rng)
        step, windows, log, done_s = ck["step"], ck["windows"], ck["log"], ck["elapsed_s"]
        print(f"resumed at step {step}, {windows} windows, {done_s / 60:.1f} min", flush=True)
    elif args.init_from:
        m = evaluate(drafter, target, val_tok, taps, args.seq, 32, 16, 7, args.device)
        log.append({"step": 0, "minutes": 0.0, **m})
        print(f"eval step 0 {json.dumps(m)}", flush=True)

    def save_resumable():
        resumable.save(args.ckpt, config_dict(dc), drafter, opt, rng, step, done_s + time.time() - t0, log,
                       windows=windows)

    t0 = last_export = last_ckpt = time.time()
    while True:
        progress = (done_s + time.time() - t0) / (args.minutes * 60) if args.minutes else step / args.steps
        if progress >= 1.0:
            break
        lr = args.lr * ((step + 1) / args.warmup if step < args.warmup
                        else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(train_tok) - args.seq - 1, size=args.batch - n_distill)
        rows = [train_tok[s:s + args.seq] for s in starts]
        rows += [distill[i] for i in rng.integers(0, len(distill), size=n_distill)] if n_distill else []
        ids = torch.from_numpy(np.stack(rows).astype(np.int64))
        anchors = torch.from_numpy(sample_anchors(rng, args.batch, args.anchors, args.seq))
        t = block_terms(drafter, target, ids.to(args.device), anchors.to(args.device), taps)
        loss, kl = loss_fn(t, args.block)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        step += 1
        windows += args.batch
        if step % 10 == 0:
            el = done_s + time.time() - t0
            print(f"step {step} loss {loss.item():.3f} kl {kl.item():.3f} lr {lr:.2e} windows {windows} "
                  f"{windows * args.seq / el:.0f} target tok/s {el / 60:.1f} min", flush=True)
        if step % args.eval_every == 0:
            m = evaluate(drafter, target, val_tok, taps, args.seq, 32, 16, 7, args.device)
            log.append({"step": step, "minutes": (done_s + time.time() - t0) / 60, **m})
            print(f"eval step {step} {json.dumps(m)}", flush=True)
        if time.time() - last_ckpt > args.ckpt_every_min * 60:
            save_resumable()
            last_ckpt = time.time()
        if time.time() - last_export > args.export_every_min * 60:
            export_drafter(drafter, args.out, {"step": str(step)})
            last_export = time.time()
            print(f"exported step {step}", flush=True)
    train_s = done_s + time.time() - t0
    export_drafter(drafter, args.out, {"step": str(step)})
    save_resumable()
    m = evaluate(drafter, target, val_tok, taps, args.seq, args.eval_windows, 16, 11, args.device)
    summary = {"params": n_params, "steps": step, "windows": windows, "anchors_per_window": args.anchors,
               "train_seconds": round(train_s), "val": m, "args": vars(args), "curve": log}
    print(json.dumps({k: v for k, v in summary.items() if k != "curve"}), flush=True)
    with open(args.ckpt.replace(".pt", "_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
