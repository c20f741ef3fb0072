#!/usr/bin/env bash
# Calibrates the shipped pair at T = 0 and T = 1 (fitted on eval/calibration.jsonl, cut from held-out files; ECE
# also reported on the edges of the three evaluation sets, which the fit never sees), measures both models'
# forward costs (bench forward: the target's L(b, k), the drafter's block forward and context extension), and
# runs `treespark bench spec` on the three evaluation sets at T = 0 and T = 1. Results: docs/results/.
# usage: tools/eval/evaluate_pair.sh [max_tokens] [prompt_limit] [threads]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${TREESPARK:-build/release/treespark}
target=models/treespark-target
drafter=models/treespark-drafter
max_tokens=${1:-64}
limit=${2:-0}
threads=${3:-}  # empty: each command's default (all cores for a model past 48 MB)
mkdir -p docs/results
for t in 0 1; do
  "$bin" calibrate --model "$target" --drafter "$drafter" --prompts eval/calibration.jsonl --temperature "$t" \
    --max-tokens 96 --seed 1 ${threads:+--threads "$threads"} \
    --holdout-prompts eval/code.jsonl eval/prose.jsonl eval/chat.jsonl | tee "docs/results/calibrate_t$t.txt"
done
"$bin" bench forward --model "$target" --drafter "$drafter" --context 256 --k 1,2,4,8,16,32 --batches 1,4,8 \
  ${threads:+--threads "$threads"} --json docs/results/bench_forward.json | tee docs/results/bench_forward.txt
for set in code prose chat; do
  "$bin" bench spec --model "$target" --drafter "$drafter" --prompts "eval/$set.jsonl" --temperatures 0,1 \
    --max-tokens "$max_tokens" --limit "$limit" ${threads:+--threads "$threads"} \
    --json "docs/results/bench_spec_$set.json" | tee "docs/results/bench_spec_$set.txt"
done
