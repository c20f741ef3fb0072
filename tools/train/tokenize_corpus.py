"""Tokenize the corpus splits into flat uint16 token streams (documents shuffled by seed, each followed by
<|endoftext|>), for train_target.py and train_drafter.py.

    /usr/bin/python3 tools/train/tokenize_corpus.py --corpus work-data/corpus --tokenizer work-data/tokenizer
"""
import argparse
import json
import os
import random
import time

import numpy as np

from bpe import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="work-data/corpus")
    ap.add_argument("--tokenizer", default="work-data/tokenizer")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    tok = Tokenizer(os.path.join(args.tokenizer, "tokenizer.json"))
    eot = tok.special["<|endoftext|>"]
    stats = {}
    for split in ("train", "val"):
        t0 = time.time()
        with open(os.path.join(args.corpus, f"{split}.jsonl")) as f:
            docs = [json.loads(line)["text"] for line in f]
        random.Random(args.seed).shuffle(docs)
        ids, n_bytes = [], 0
        for d in docs:
            ids.extend(tok.encode(d))
            ids.append(eot)
            n_bytes += len(d.encode())
        arr = np.asarray(ids, dtype=np.uint16)  # [n_tokens]; vocab 4096 fits
        np.save(os.path.join(args.corpus, f"{split}.npy"), arr)
        stats[split] = {"tokens": int(arr.size), "bytes": n_bytes, "bytes_per_token": n_bytes / arr.size}
        print(split, stats[split], f"{time.time() - t0:.0f}s", flush=True)
        if split == "val":  # round trip: byte-level BPE must be lossless on text without specials
            sample = docs[:50]
            bad = sum(tok.decode(tok.encode(d)) != d for d in sample)
            print(f"round-trip mismatches on 50 val docs: {bad}")
    with open(os.path.join(args.corpus, "tokens.json"), "w") as f:
        json.dump(stats, f, indent=1)


if __name__ == "__main__":
    main()
