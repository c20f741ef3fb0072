# Greedy identity on every prompt of the three evaluation sets: TreeSpark (adaptive tree) vs the target alone,
# 64 tokens each, through `generate --compare` (which fails when the greedy texts differ).
# usage: python3 tools/eval/greedy_identity.py   (from the repository root, after a release build)
import json, subprocess, sys
bad = 0; n = 0
for s in ("code", "prose", "chat"):
    for line in open(f"eval/{s}.jsonl"):
        j = json.loads(line)
        args = ["build/release/treespark", "generate", "--model", "models/treespark-target", "--drafter",
                "models/treespark-drafter", "--mode", "tree", "--adaptive-theta", "--temperature", "0",
                "--max-tokens", "64", "--compare", "--threads", "1"]
        if "messages" in j:
            args += ["--chat", "--prompt", j["messages"][-1]["content"]]
        else:
            args += ["--prompt", j["prompt"]]
        r = subprocess.run(args, capture_output=True, text=True)
        n += 1
        if r.returncode != 0 or "greedy texts identical" not in r.stderr:
            bad += 1; print("MISMATCH", j["id"], r.stderr[-300:])
print(f"{n} prompts, {bad} mismatches")
