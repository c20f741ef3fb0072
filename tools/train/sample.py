"""Print samples of the exported target on prompts of the eval sets (for the model card; the engine's own
`treespark generate` is the reference once it exists). Chat prompts are rendered as ChatML with the empty think
block the template adds when enable_thinking is false.

    /usr/bin/python3 tools/train/sample.py --target models/treespark-target --n 2 --tokens 60
"""
import argparse
import json
import os

import torch

from bpe import Tokenizer
from train_drafter import load_target


def render_chat(messages):
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@torch.no_grad()
def generate(model, ids, n_tokens, temperature, stop_ids, gen):
    ids = list(ids)
    for _ in range(n_tokens):
        logits = model(torch.tensor([ids[-1000:]]))[0, -1].float()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen))
        ids.append(nxt)
        if nxt in stop_ids:
            break
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/treespark-target")
    ap.add_argument("--eval", default="eval")
    ap.add_argument("--n", type=int, default=2, help="prompts per set")
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load_target(args.target, "cpu")
    tok = Tokenizer(os.path.join(args.target, "tokenizer.json"))
    stop = {tok.special["<|im_end|>"], tok.special["<|endoftext|>"]}
    gen = torch.Generator().manual_seed(0)
    for name in ("code", "prose", "chat"):
        with open(os.path.join(args.eval, f"{name}.jsonl")) as f:
            rows = [json.loads(line) for line in f][:args.n]
        for r in rows:
            prompt = render_chat(r["messages"]) if "messages" in r else r["prompt"]
            ids = tok.encode(prompt)
            out = generate(model, ids, args.tokens, args.temperature, stop, gen)
            print(f"=== {r['id']} (T={args.temperature})\n{prompt}\u2588{tok.decode(out[len(ids):])}\n")


if __name__ == "__main__":
    main()
