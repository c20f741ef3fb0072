"""Greedy chain speculative decoding of the exported pair in PyTorch: a pre-engine estimate of acceptance.

Each round: anchor = last committed token, context = the target's layer outputs of the committed tokens before it;
one drafter pass gives U; the chain follows the drafter's greedy Markov conditionals (row k's previous token is
the draft of row k-1, the anchor for row 0) for --draft-len tokens; the target, run on the committed tokens plus
the chain, accepts drafts while they equal its argmax and adds its own next token (the bonus). Reports the mean
tokens per round (accepted drafts + bonus) per prompt set. No KV cache: every round recomputes the prefix, which
is fine at these sizes. The engine's `treespark bench spec` is the reference; this only predicts it.

    /usr/bin/python3 tools/train/simulate_chain.py --target models/treespark-target --drafter models/treespark-drafter
"""
import argparse
import json
import os

import torch

from bpe import Tokenizer
from export import read_folder
from model import Drafter, DrafterConfig
from sample import render_chat
from train_drafter import load_target


def load_drafter(folder):
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    d = Drafter(DrafterConfig(**{k: hf[k] for k in DrafterConfig.__dataclass_fields__}))
    d.load_state_dict(read_folder(folder))
    return d.eval()


@torch.no_grad()
def run_prompt(target, drafter, ids, n_new, draft_len, stop):
    ids = list(ids)
    start, rounds = len(ids), 0
    logits, hidden = target(torch.tensor([ids]), return_hidden=True)
    while len(ids) - start < n_new:
        taps = torch.cat([hidden[l] for l in drafter.c.target_layer_ids], -1)  # [1, n, n_taps*H]
        U = drafter(taps, torch.tensor([ids]), torch.tensor([[len(ids) - 1]]))[0, 0]  # [B, V]
        prev, chain = ids[-1], []
        for k in range(draft_len):
            prev = int((U[k] + drafter.markov_head(torch.tensor(prev))).argmax())
            chain.append(prev)
        logits, hidden = target(torch.tensor([ids + chain]), return_hidden=True)
        best = logits[0, len(ids) - 1:].argmax(-1).tolist()  # target's choice after each prefix
        n_acc = 0
        while n_acc < len(chain) and chain[n_acc] == best[n_acc]:
            n_acc += 1
        new = chain[:n_acc] + [best[n_acc]]
        rounds += 1
        ids += new
        if any(t in stop for t in new):
            break
        logits, hidden = target(torch.tensor([ids]), return_hidden=True)
    return len(ids) - start, rounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/treespark-target")
    ap.add_argument("--drafter", default="models/treespark-drafter")
    ap.add_argument("--eval", default="eval")
    ap.add_argument("--prompts", type=int, default=20, help="first N prompts of each set")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--draft-len", type=int, default=None, help="default: block_size")
    args = ap.parse_args()
    torch.set_num_threads(1)
    target, drafter = load_target(args.target, "cpu"), load_drafter(args.drafter)
    tok = Tokenizer(os.path.join(args.target, "tokenizer.json"))
    stop = {tok.special["<|im_end|>"], tok.special["<|endoftext|>"]}
    k = args.draft_len or drafter.c.block_size
    out = {}
    for name in ("code", "prose", "chat"):
        with open(os.path.join(args.eval, f"{name}.jsonl")) as f:
            rows = [json.loads(line) for line in f][:args.prompts]
        toks = rnds = 0
        for r in rows:
            prompt = render_chat(r["messages"]) if "messages" in r else r["prompt"]
            t, n = run_prompt(target, drafter, tok.encode(prompt), args.tokens, k, stop)
            toks, rnds = toks + t, rnds + n
        out[name] = {"prompts": len(rows), "tokens": toks, "rounds": rnds, "tokens_per_round": round(toks / rnds, 3)}
        print(name, out[name], flush=True)
    print(json.dumps({"draft_len": k, **out}))


if __name__ == "__main__":
    main()
