#!/bin/bash
# TREESPARK_VNNI=0 runs the quantized GEMM's VNNI-free copies (the path of AVX2-only CPUs such as Zen 3) on any
# x86 CPU: the weights line names a GEMM without VNNI or AMX-INT8, and, the copies being exact emulations, greedy
# speculative output on a quantized target is token for token the default path's. A tiny random pair, made here.
#   vnni_off_test.sh <treespark binary>
source "$(dirname "$0")/common.sh" "$@"

make_quantizable_pair
for q in q4_0 q8_0 q4_k_m; do
  gen() { "$bin" generate --model "$dir/target" --drafter "$dir/drafter" --quantize $q --prompt-ids 1,2,3,4 \
    --max-tokens 24 --temperature 0 --threads 2 --json; }
  gen > "$dir/default.json" 2> "$dir/default.err" || { cat "$dir/default.err"; fail "$q: default path"; }
  TREESPARK_VNNI=0 gen > "$dir/plain.json" 2> "$dir/plain.err" || { cat "$dir/plain.err"; fail "$q: TREESPARK_VNNI=0"; }
  line="$(grep 'target weights' "$dir/plain.err")"
  echo "$line" | grep -q '(qgemm-' || fail "$q: no GEMM named: $line"
  if echo "$line" | grep -qE 'vnni|amx-int8'; then fail "$q: TREESPARK_VNNI=0 still runs $line"; fi
  [ "$(ids < "$dir/plain.json")" = "$(ids < "$dir/default.json")" ] || fail "$q: greedy ids differ without VNNI"
done
if TREESPARK_VNNI=no "$bin" generate --model "$dir/target" --quantize q4_0 --prompt-ids 1,2 --max-tokens 2 \
    --mode none > /dev/null 2> "$dir/bad.err"; then fail "TREESPARK_VNNI=no accepted"; fi
grep -q "TREESPARK_VNNI=no: expected 0" "$dir/bad.err" || { cat "$dir/bad.err"; fail "no clear message for TREESPARK_VNNI=no"; }
echo "ok: TREESPARK_VNNI=0 names a VNNI-free GEMM and writes the default path's greedy ids (q4_0, q8_0, q4_k_m)"
