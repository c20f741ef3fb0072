#!/usr/bin/env python3
"""Writes eval/calibration.jsonl: prompts for `treespark calibrate`, cut from the corpus's VALIDATION split (files
held out from training, tools/train/corpus.py), so that calibration neither sees training text nor the benchmark
prompt sets in eval/. Each prompt is the opening of one held-out file, cut at a line end after ~400 characters.

usage: python3 tools/eval/make_calibration_set.py [work-data/corpus/val.jsonl] [eval/calibration.jsonl] [N]
"""
import json
import random
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "work-data/corpus/val.jsonl"
dst = sys.argv[2] if len(sys.argv) > 2 else "eval/calibration.jsonl"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 48

docs = [json.loads(line) for line in open(src, encoding="utf-8")]
random.Random(7).shuffle(docs)
out = []
for d in docs:
    text = d["text"].lstrip()
    if len(text) < 200:
        continue
    cut = text.find("\n", 400)
    prompt = text[: cut + 1] if 0 < cut < 800 else text[:400]
    out.append({"id": f"cal-{len(out):02d}", "src": d.get("src", ""), "path": d.get("path", ""), "prompt": prompt})
    if len(out) == n:
        break
with open(dst, "w", encoding="utf-8") as f:
    for o in out:
        f.write(json.dumps(o, ensure_ascii=False) + "\n")
print(f"wrote {len(out)} prompts to {dst}")
