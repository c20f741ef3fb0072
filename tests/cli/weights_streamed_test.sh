#!/bin/bash
# TREESPARK_WEIGHTS_STREAMED=1 makes the quantized GEMM take the tiles of weights streamed from DRAM (two output
# groups per tile for a few rows) on any model: the weights line says so, greedy speculative output equals plain
# greedy output and the default tiles' ids (the same bits either way), and values other than 0 or 1 are refused by
# name. A tiny random pair, made here.
#   weights_streamed_test.sh <treespark binary>
source "$(dirname "$0")/common.sh" "$@"

make_quantizable_pair
for q in q4_0 q8_0 q4_k_m; do
  gen() { "$bin" generate --model "$dir/target" --drafter "$dir/drafter" --quantize $q --prompt-ids 1,2,3,4 \
    --max-tokens 24 --temperature 0 --threads 2 --json "$@"; }
  gen > "$dir/default.json" 2> "$dir/default.err" || { cat "$dir/default.err"; fail "$q: default tiles"; }
  grep 'target weights' "$dir/default.err" | grep -q 'streamed' && fail "$q: a tiny model said streamed"
  TREESPARK_WEIGHTS_STREAMED=1 gen > "$dir/streamed.json" 2> "$dir/streamed.err" \
    || { cat "$dir/streamed.err"; fail "$q: TREESPARK_WEIGHTS_STREAMED=1"; }
  grep 'target weights' "$dir/streamed.err" | grep -q 'streamed from DRAM' \
    || fail "$q: the weights line does not say streamed: $(grep 'target weights' "$dir/streamed.err")"
  TREESPARK_WEIGHTS_STREAMED=1 gen --mode none > "$dir/plain.json" 2> "$dir/plain.err" \
    || { cat "$dir/plain.err"; fail "$q: TREESPARK_WEIGHTS_STREAMED=1, plain decoding"; }
  [ "$(ids < "$dir/streamed.json")" = "$(ids < "$dir/plain.json")" ] || fail "$q: streamed speculative ids differ from plain"
  [ "$(ids < "$dir/streamed.json")" = "$(ids < "$dir/default.json")" ] || fail "$q: streamed ids differ from the default tiles'"
done
if TREESPARK_WEIGHTS_STREAMED=yes "$bin" generate --model "$dir/target" --quantize q4_0 --prompt-ids 1,2 \
    --max-tokens 2 --mode none > /dev/null 2> "$dir/bad.err"; then fail "TREESPARK_WEIGHTS_STREAMED=yes accepted"; fi
grep -q "TREESPARK_WEIGHTS_STREAMED=yes: expected 0" "$dir/bad.err" \
  || { cat "$dir/bad.err"; fail "no clear message for TREESPARK_WEIGHTS_STREAMED=yes"; }
echo "ok: TREESPARK_WEIGHTS_STREAMED=1 says streamed and writes the plain and default ids (q4_0, q8_0, q4_k_m)"
