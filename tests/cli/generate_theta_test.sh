#!/bin/bash
# `treespark generate` in tree mode prices nodes with the measured cost curve by default (cached once per machine
# and model), a --theta given alone or --fixed-theta grows fixed-theta trees, the two policy flags exclude each
# other, and all of them write exactly the target's greedy text. A tiny random pair, made here.
#   generate_theta_test.sh <treespark binary>
source "$(dirname "$0")/common.sh" "$@"

"$bin" make-model --out "$dir/target" --drafter-out "$dir/drafter" --dtype bf16 --vocab 256 --hidden 64 \
  --intermediate 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 > /dev/null 2>&1 || fail "make-model"
gen() { "$bin" generate --model "$dir/target" --drafter "$dir/drafter" --prompt-ids 1,2,3,4 --max-tokens 24 \
  --temperature 0 --threads 1 --json "$@"; }
field() { /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.readline()); print(json.dumps(d.get('$1')))"; }

gen > "$dir/adaptive.json" 2> "$dir/adaptive.err" || { cat "$dir/adaptive.err"; fail "default tree mode"; }
[ "$(field theta < "$dir/adaptive.json")" = '"adaptive"' ] || fail "default tree mode is not adaptive: $(cat "$dir/adaptive.json")"
ls "$XDG_CACHE_HOME"/treespark/cost-*.json > /dev/null 2>&1 || fail "the cost curve was not cached"
gen 2> "$dir/again.err" > /dev/null || fail "second run"
grep -q "cost curve from" "$dir/again.err" || { cat "$dir/again.err"; fail "the second run measured again"; }

gen --theta 0.1 > "$dir/theta.json" 2> /dev/null || fail "--theta 0.1"
[ "$(field theta < "$dir/theta.json")" = "0.1" ] || fail "--theta alone should be fixed: $(field theta < "$dir/theta.json")"
gen --fixed-theta > "$dir/fixed.json" 2> /dev/null || fail "--fixed-theta"
[ "$(field theta < "$dir/fixed.json")" = "0.05" ] || fail "--fixed-theta should use 0.05"
gen --theta 0.1 --adaptive-theta > "$dir/floor.json" 2> /dev/null || fail "--theta with --adaptive-theta"
[ "$(field theta < "$dir/floor.json")" = '"adaptive"' ] || fail "--adaptive-theta with --theta should stay adaptive"
if gen --fixed-theta --adaptive-theta > /dev/null 2> "$dir/both.err"; then fail "both policy flags accepted"; fi
grep -q "exclude each other" "$dir/both.err" || { cat "$dir/both.err"; fail "no clear message for both flags"; }

gen --log-level debug > "$dir/debug.json" 2> "$dir/debug.err" || { cat "$dir/debug.err"; fail "--log-level debug"; }
rounds="$(field rounds < "$dir/debug.json")"
# The first round also extends the drafter's context over the prompt (its backlog), and says so.
lines="$(grep -cE '^treespark policy: step [0-9]+ batch 1 .*actual [0-9.e+-]+ ms( \(drafter backlog [0-9]+ rows [0-9.e+-]+ ms\))?; \[1 theta .* nodes [0-9]+ acc [0-9]+\]' "$dir/debug.err")"
[ "$lines" -ge "$rounds" ] && [ "$rounds" -gt 0 ] || { cat "$dir/debug.err"; fail "--log-level debug: $lines step lines for $rounds rounds"; }
if gen --log-level loud > /dev/null 2>&1; then fail "--log-level loud accepted"; fi

gen --mode none > "$dir/none.json" 2> /dev/null || fail "--mode none"
ids_none="$(field ids < "$dir/none.json")"
for f in adaptive theta fixed floor debug; do
  [ "$(field ids < "$dir/$f.json")" = "$ids_none" ] || fail "$f: greedy ids differ from the target alone"
done
echo "generate theta policy: ok"
