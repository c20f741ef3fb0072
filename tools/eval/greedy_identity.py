# Greedy identity on every prompt of the three evaluation sets: TreeSpark (adaptive tree) vs the target alone,
# 64 tokens each, through `generate --compare` (which fails when the greedy texts differ), for each weight format
# asked for (the target quantized at load with --quantize; the texts compared are that format's own).
# usage: python3 tools/eval/greedy_identity.py [--quantize native q4_k_m ...] [--drafter DIR]
#        (from the repository root, after a release build)
import argparse, json, subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--quantize", nargs="+", default=["native"], help="target weight formats: native, q8_0, q4_0, q4_k_m")
ap.add_argument("--drafter", default="models/treespark-drafter")
args = ap.parse_args()
for fmt in args.quantize:
    bad = 0; n = 0
    for s in ("code", "prose", "chat"):
        for line in open(f"eval/{s}.jsonl"):
            j = json.loads(line)
            cmd = ["build/release/treespark", "generate", "--model", "models/treespark-target", "--drafter",
                   args.drafter, "--quantize", fmt, "--mode", "tree", "--adaptive-theta", "--temperature", "0",
                   "--max-tokens", "64", "--compare", "--threads", "1"]
            if "messages" in j:
                cmd += ["--chat", "--prompt", j["messages"][-1]["content"]]
            else:
                cmd += ["--prompt", j["prompt"]]
            r = subprocess.run(cmd, capture_output=True, text=True)
            n += 1
            if r.returncode != 0 or "greedy texts identical" not in r.stderr:
                bad += 1; print("MISMATCH", fmt, j["id"], r.stderr[-300:])
    print(f"{fmt}: {n} prompts, {bad} mismatches")
