"""Train the Qwen3-architecture target on the tokenized corpus and export it as a Hugging Face folder.

CPU is the documented path (Debian python3-torch 1.13, --threads (1 on a shared machine), bf16 autocast; run with the GLIBC_TUNABLES of
run_pipeline.sh). The learning-rate schedule (linear warm-up, cosine to 10%) runs over --steps, or, when
--minutes is given, over wall-clock time (the step count reached is logged and can be passed back as --steps to
replay the run exactly). Data windows and initialisation are seeded.

    /usr/bin/python3 tools/train/train_target.py --data work-data/corpus --tokenizer work-data/tokenizer \
        --out models/treespark-target --minutes 40
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from export import export_target
from grow_target import load_target
import resumable
from model import Target, TargetConfig, config_dict


def batches(tokens, n, seq, rng):
    """n random windows of seq+1 tokens -> (input [n, seq], labels [n, seq])."""
    starts = rng.integers(0, len(tokens) - seq - 1, size=n)
    w = torch.from_numpy(np.stack([tokens[s:s + seq + 1] for s in starts]).astype(np.int64))
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate(model, tokens, seq, batch, device, max_tokens=None):
    """Mean next-token cross-entropy (nats) over consecutive non-overlapping windows of the validation stream."""
    model.eval()
    n_win = (len(tokens) - 1) // seq
    if max_tokens:
        n_win = min(n_win, max_tokens // seq)
    total, count = 0.0, 0
    for i in range(0, n_win, batch):
        idx = range(i, min(i + batch, n_win))
        w = torch.from_numpy(np.stack([tokens[j * seq:j * seq + seq + 1] for j in idx]).astype(np.int64)).to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = model(w[:, :-1])
        total += F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


def lr_at(progress, base, warmup_frac, step, warmup_steps):
    if step < warmup_steps:
        return base * (step + 1) / warmup_steps
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="work-data/corpus")
    ap.add_argument("--tokenizer", default="work-data/tokenizer")
    ap.add_argument("--out", default="models/treespark-target")
    ap.add_argument("--ckpt", default="work-data/target.pt")
    ap.add_argument("--device", default="cpu", help="cpu (documented) or cuda")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads; 1 on a shared machine: with 2, every op's OpenMP barrier waits out the "
                         "other thread's scheduler slice (measured 5-10x slower under load)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=591)
    ap.add_argument("--minutes", type=float, default=None, help="schedule over wall-clock time instead of --steps")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--export-every-min", type=float, default=10.0)
    ap.add_argument("--init-from", default=None,
                    help="start from an exported target folder (its config.json gives the shape; e.g. the output "
                         "of grow_target.py) instead of a random initialisation")
    ap.add_argument("--resume", action="store_true",
                    help="go on from --ckpt if it holds a resumable state (model, optimiser, step, data RNG, "
                         "elapsed minutes), with the same arguments")
    ap.add_argument("--ckpt-every-min", type=float, default=5.0, help="resumable checkpoint period")
    args = ap.parse_args()

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_tok = np.load(os.path.join(args.data, "train.npy"))
    val_tok = np.load(os.path.join(args.data, "val.npy"))
    with open(os.path.join(args.tokenizer, "tokenizer.json")) as f:
        tok_ids = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    if args.init_from:
        model = load_target(args.init_from)
        cfg = model.c
        model = model.to(args.device)
    else:
        cfg = TargetConfig(vocab_size=4096, hidden_size=args.hidden, intermediate_size=args.intermediate,
                           num_hidden_layers=args.layers, num_attention_heads=args.heads,
                           num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads)
        model = Target(cfg).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"target {config_dict(cfg)}: {n_params / 1e6:.2f}M parameters; train {len(train_tok)} val {len(val_tok)} "
          f"tokens", flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, seen, log, done_s = 0, 0, [], 0.0  # done_s: training seconds of earlier runs of a resumed schedule
    if args.resume and os.path.exists(args.ckpt):
        ck = resumable.load(args.ckpt, model, opt, rng)
        step, seen, log, done_s = ck["step"], ck["seen"], ck["log"], ck["elapsed_s"]
        print(f"resumed at step {step}, {seen} tokens, {done_s / 60:.1f} min", flush=True)
    if args.init_from:
        vl0 = evaluate(model, val_tok, args.seq, 16, args.device, max_tokens=30_000)
        print(f"initial val_loss(30k tokens) {vl0:.3f}", flush=True)
        if not log:
            log.append({"step": 0, "tokens": 0, "minutes": 0.0, "val_loss_30k": vl0})

    def save_resumable():
        resumable.save(args.ckpt, config_dict(cfg), model, opt, rng, step, done_s + time.time() - t0, log, seen=seen)

    t0 = last_export = last_ckpt = time.time()
    while True:
        elapsed = done_s + time.time() - t0
        progress = elapsed / (args.minutes * 60) if args.minutes else step / args.steps
        if progress >= 1.0:
            break
        lr = lr_at(progress, args.lr, 0, step, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batches(train_tok, args.batch, args.seq, rng)
        x, y = x.to(args.device), y.to(args.device)
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += x.numel()
        if step % 20 == 0:
            el = done_s + time.time() - t0
            print(f"step {step} loss {loss.item():.3f} lr {lr:.2e} tokens {seen} {seen / el:.0f} tok/s "
                  f"{el / 60:.1f} min", flush=True)
        if step % args.eval_every == 0:
            vl = evaluate(model, val_tok, args.seq, 16, args.device, max_tokens=30_000)
            log.append({"step": step, "tokens": seen, "minutes": (done_s + time.time() - t0) / 60, "val_loss_30k": vl})
            print(f"eval step {step} val_loss(30k tokens) {vl:.3f} ppl {math.exp(vl):.1f}", flush=True)
        if time.time() - last_ckpt > args.ckpt_every_min * 60:
            save_resumable()
            last_ckpt = time.time()
        if time.time() - last_export > args.export_every_min * 60:
            export_target(model, args.tokenizer, args.out, tok_ids, {"step": str(step)})
            last_export = time.time()
            print(f"exported step {step}", flush=True)
    train_s = done_s + time.time() - t0
    vl = evaluate(model, val_tok, args.seq, 16, args.device)
    summary = {"params": n_params, "steps": step, "tokens_seen": seen, "train_seconds": round(train_s),
               "tokens_per_second": round(seen / train_s), "val_loss": vl, "val_ppl": math.exp(vl),
               "val_tokens": (len(val_tok) - 1) // args.seq * args.seq, "args": vars(args), "curve": log}
    print(json.dumps({k: v for k, v in summary.items() if k != "curve"}), flush=True)
    save_resumable()
    export_target(model, args.tokenizer, args.out, tok_ids, {"step": str(step)})
    with open(args.ckpt.replace(".pt", "_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
