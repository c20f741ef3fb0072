"""Windows of the target's own continuations, for train_drafter.py --distill-windows.

A drafter is judged on the target's own text: at T = 0 every accepted token is the target's greedy choice, so the
block rows after an anchor are conditioned on the target's continuation, not on corpus text. This writes windows of
`--prefix` corpus tokens (random places of the training split) followed by `--new` tokens the target generated from
them, alternating the temperatures given (greedy, then sampled with generation_config.json's filters), through the
release build's `generate` (speculative decoding is lossless, so it only makes the decoding faster). Completions that
stop before `--new` tokens (end of text) are skipped.

Output: an [n, prefix + new] uint16 array (.npy) and a JSON summary beside it.

    /usr/bin/python3 tools/train/make_distill_windows.py --n 1200 --out work-data/distill.npy
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import time

import numpy as np


def generate(args, prefix, temperature, seed):
    cmd = [args.bin, "generate", "--model", args.target, "--drafter", args.drafter, "--mode", "tree",
           "--adaptive-theta", "--prompt-ids", ",".join(str(int(t)) for t in prefix), "--max-tokens", str(args.new),
           "--temperature", str(temperature), "--seed", str(seed), "--threads", "1", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.splitlines()[0])["ids"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="work-data/corpus/train.npy")
    ap.add_argument("--bin", default="build/release/treespark")
    ap.add_argument("--target", default="models/treespark-target")
    ap.add_argument("--drafter", default="models/treespark-drafter")
    ap.add_argument("--n", type=int, default=1200, help="completions to request")
    ap.add_argument("--prefix", type=int, default=64)
    ap.add_argument("--new", type=int, default=192)
    ap.add_argument("--temperatures", default="0,0.7", help="used in turn, comma-separated")
    ap.add_argument("--jobs", type=int, default=2, help="generate processes at once (one thread each)")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--out", default="work-data/distill.npy")
    args = ap.parse_args()
    tokens = np.load(args.data)
    rng = np.random.default_rng(args.seed)
    temps = [float(t) for t in args.temperatures.split(",")]
    starts = rng.integers(0, len(tokens) - args.prefix, size=args.n)
    jobs = [(tokens[s:s + args.prefix], temps[i % len(temps)], args.seed + i) for i, s in enumerate(starts)]
    t0 = time.time()
    windows, short = [], 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for i, (job, ids) in enumerate(zip(jobs, pool.map(lambda j: generate(args, *j), jobs))):
            if (i + 1) % 100 == 0:
                print(f"{i + 1}/{args.n} completions, {time.time() - t0:.0f} s", flush=True)
            if len(ids) < args.new:
                short += 1
                continue
            windows.append(np.concatenate([job[0], np.asarray(ids[:args.new])]).astype(np.uint16))
    arr = np.stack(windows)  # [windows, prefix + new]
    np.save(args.out, arr)
    summary = {"windows": int(arr.shape[0]), "skipped_short": short, "prefix": args.prefix, "new": args.new,
               "temperatures": temps, "seed": args.seed, "seconds": round(time.time() - t0)}
    with open(os.path.splitext(args.out)[0] + "_summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
