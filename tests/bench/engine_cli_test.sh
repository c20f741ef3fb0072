#!/bin/bash
# `treespark bench engine` end to end on a tiny random pair (what it measures is not asserted: timings are not
# tests): --arms picks the arms beside the baseline; with --vary-max-tokens request i's limit runs from
# max-tokens / 2 to 1.5 x max-tokens, so every arm generates the sum of those limits where one limit for all
# generates prompts x max-tokens.
#   engine_cli_test.sh <treespark binary>
source "$(dirname "$0")/../cli/common.sh" "$@"

"$bin" make-model --out "$dir/target" --drafter-out "$dir/drafter" --dtype bf16 --vocab 256 --hidden 64 \
  --intermediate 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 > /dev/null 2>&1 || fail "make-model"
for i in 0 1 2 3; do echo "{\"ids\": [1, 2, $((3 + i)), $((10 + i))]}"; done > "$dir/prompts.jsonl"
run() { "$bin" bench engine --model "$dir/target" --drafter "$dir/drafter" --prompts "$dir/prompts.jsonl" \
  --concurrency 2 --max-tokens 8 --repeats 1 --threads 1 --json "$dir/$1.json" "${@:2}" > "$dir/$1.out" 2>&1 ||
  { cat "$dir/$1.out"; fail "bench engine $*"; }; }
run same
run varied --vary-max-tokens
grep -q 'prompts x 8 tokens$' "$dir/same.out" || { cat "$dir/same.out"; fail "no 'x 8 tokens' header"; }
grep -q 'prompts x 4-12 tokens (varied limits)' "$dir/varied.out" || { cat "$dir/varied.out"; fail "no varied header"; }
# Greedy on a random model that never emits its stop token in 12 tokens: each arm generates exactly the limits' sum,
# 4 x 8 = 32 with one limit, 4 + 5 + 6 + 7 = 22 varied (8 / 2 + 37 i mod 9).
/usr/bin/python3 - "$dir/same.json" "$dir/varied.json" <<'PY' || fail "tokens per arm are not the limits' sum"
import json, sys
same, varied = (json.load(open(p)) for p in sys.argv[1:3])
assert {r["tokens"] for r in same} == {32}, [(r["arm"], r["tokens"]) for r in same]
assert {r["tokens"] for r in varied} == {22}, [(r["arm"], r["tokens"]) for r in varied]
assert all(r["vary_max_tokens"] for r in varied) and not any(r["vary_max_tokens"] for r in same)
PY
# --arms runs the baseline and the arms named, and refuses a name it does not know.
run two --arms chain,adaptive
/usr/bin/python3 - "$dir/two.json" <<'PY' || fail "--arms chain,adaptive did not run none, chain-4 and adaptive"
import json, sys
arms = [r["arm"] for r in json.load(open(sys.argv[1]))]
assert arms == ["none", "chain-4", "adaptive"], arms
PY
if "$bin" bench engine --model "$dir/target" --drafter "$dir/drafter" --prompts "$dir/prompts.jsonl" \
    --arms adaptive,fast > "$dir/bad.out" 2>&1; then
  fail "--arms fast was accepted"
fi
grep -q "unknown arm 'fast'" "$dir/bad.out" || { cat "$dir/bad.out"; fail "no error naming the unknown arm"; }
echo "bench engine --vary-max-tokens, --arms OK"
