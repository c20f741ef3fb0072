#!/usr/bin/env bash
# Calibrates the shipped pair at T = 0 and T = 1 (on eval/calibration.jsonl, cut from held-out files) and runs
# `treespark bench spec` on the three evaluation sets at T = 0 and T = 1. Results: docs/results/.
# usage: tools/eval/evaluate_pair.sh [max_tokens] [prompt_limit]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${TREESPARK:-build/release/treespark}
target=models/treespark-target
drafter=models/treespark-drafter
max_tokens=${1:-64}
limit=${2:-0}
mkdir -p docs/results
for t in 0 1; do
  "$bin" calibrate --model "$target" --drafter "$drafter" --prompts eval/calibration.jsonl --temperature "$t" \
    --max-tokens 96 --seed 1 | tee "docs/results/calibrate_t$t.txt"
done
for set in code prose chat; do
  "$bin" bench spec --model "$target" --drafter "$drafter" --prompts "eval/$set.jsonl" --temperatures 0,1 \
    --max-tokens "$max_tokens" --limit "$limit" --json "docs/results/bench_spec_$set.json" \
    | tee "docs/results/bench_spec_$set.txt"
done
