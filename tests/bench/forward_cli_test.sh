#!/bin/bash
# `treespark bench forward` end to end on a tiny random model: a lone --k still measures k = 1 (every figure is a
# ratio to it; k = 1 alone gets k = 2 beside it, a curve needs two points), --prefill 0 skips the prefill, and bad
# counts fail with a message before any measuring.
#   forward_cli_test.sh <treespark binary>
set -u
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin" make-model --out "$dir/model" --dtype bf16 --vocab 256 --hidden 64 --intermediate 128 --layers 2 \
  --heads 4 --kv-heads 2 --head-dim 16 > /dev/null 2>&1 || fail "make-model"

"$bin" bench forward --model "$dir/model" --threads 1 --batches 1 --context 16 --k 4 --reps 1 --prefill 0 \
  --json "$dir/out.json" > "$dir/stdout" 2> "$dir/stderr" || { cat "$dir/stderr"; fail "a lone --k 4 should run"; }
grep -q '"k": 1,' "$dir/out.json" || fail "k = 1 missing from the JSON"
grep -q '"k": 4,' "$dir/out.json" || fail "k = 4 missing from the JSON"
# Each point carries the price of a row beyond the first, (L(1,4) - L(1,1)) / 3, in the JSON and in the table,
# signed: timed once on this tiny model, k = 4 can come out below k = 1.
/usr/bin/python3 - "$dir/out.json" <<'PY' || fail "ms_per_extra_row of k = 4 is not (L(1,4) - L(1,1)) / 3"
import json, sys
pts = {p["k"]: p for v in json.load(open(sys.argv[1]))["variants"] for p in v["points"] if p["batch"] == 1}
assert pts[1]["ms_per_extra_row"] == 0
assert abs(pts[4]["ms_per_extra_row"] - (pts[4]["ms"] - pts[1]["ms"]) / 3) < 1e-9
PY
grep -qE '^ +- +[+-][0-9]+\.[0-9]{3}' "$dir/stdout" || { cat "$dir/stdout"; fail "no per-row price line"; }
# The side-by-side row: no prefill was timed, so its columns say "-", not 0.
row="$(grep -E '^bf16 +[0-9.]+ (scalar|avx2|avx512|avx512bf16|amx) ' "$dir/stdout" | head -n 1)"
[ -n "$row" ] || { cat "$dir/stdout"; fail "no side-by-side row"; }
[ "$(echo "$row" | awk '{print $NF}')" = "-" ] || fail "pf/dec should be '-' with --prefill 0: $row"

"$bin" bench forward --model "$dir/model" --threads 1 --batches 1 --context 16 --k 1 --reps 1 --prefill 4 \
  --json "$dir/one.json" > /dev/null 2> "$dir/stderr" || { cat "$dir/stderr"; fail "--k 1 alone should run"; }
grep -q '"prefill_tokens": 4' "$dir/one.json" || fail "--prefill 4 not in the JSON"

# --quantize: one side-by-side row per weight format, each with its own (smaller) weight bytes.
"$bin" bench forward --model "$dir/model" --threads 1 --batches 1 --context 16 --k 2 --reps 1 --prefill 0 \
  --quantize native,q8_0,q4_0 --json "$dir/q.json" > "$dir/stdout" 2> "$dir/stderr" ||
  { cat "$dir/stderr"; fail "--quantize native,q8_0,q4_0 should run"; }
for f in '^bf16 ' '^q8_0 \(projections Q8_0, lm_head Q8_0' '^q4_0 \(projections Q4_0, lm_head Q8_0'; do
  grep -qE "$f" "$dir/stdout" || { cat "$dir/stdout"; fail "no side-by-side row for $f"; }
done
gb() { grep -E "$1" "$dir/stdout" | tail -n 1 | awk '{for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9]+\.[0-9]+$/) { print $i; exit }}'; }
awk -v a="$(gb '^bf16 ')" -v b="$(gb '^q8_0 ')" -v c="$(gb '^q4_0 ')" 'BEGIN { exit !(a > b && b > c) }' ||
  fail "weight GB should shrink bf16 > q8_0 > q4_0: $(gb '^bf16 ') $(gb '^q8_0 ') $(gb '^q4_0 ')"
# The integer floor at the tile's block-work rate: probed (and printed) where the quantized GEMM runs the zmm VNNI
# kernel, absent elsewhere.
vnni=0
if grep -qw avx512_vnni /proc/cpuinfo && [[ "${TREESPARK_ISA:-}" != scalar && "${TREESPARK_ISA:-}" != avx2 ]]; then vnni=1; fi
/usr/bin/python3 - "$dir/q.json" "$vnni" <<'PY' || { cat "$dir/stdout"; fail "the int8 block-work floor is missing or wrong"; }
import json, sys
floors = [f for f in json.load(open(sys.argv[1]))["compute_floors"] if f["product"] == "int8"]
assert floors or sys.argv[2] == "0", "no int8 floor"  # scalar has none
for f in floors:
    if sys.argv[2] == "1":
        assert 0 < f["block_macs_per_ns"] < 1.25 * f["peak_macs_per_ns"], f
        assert f["block_k16_floor"] >= 1.0, f
    else:
        assert "block_macs_per_ns" not in f, f
PY
if [[ $vnni == 1 ]]; then grep -qE '^[a-z0-9]+ +i8 block ' "$dir/stdout" || { cat "$dir/stdout"; fail "no i8 block line"; }; fi
if "$bin" bench forward --model "$dir/model" --threads 1 --context 16 --reps 1 --quantize q3_x > /dev/null 2> "$dir/err"; then
  fail "--quantize q3_x should fail"
fi
grep -q "unknown weight format 'q3_x'" "$dir/err" || { cat "$dir/err"; fail "--quantize q3_x: no clear message"; }

for bad in "--k 0" "--batches 0" "--prefill -1"; do
  # shellcheck disable=SC2086
  if "$bin" bench forward --model "$dir/model" --threads 1 --context 16 --reps 1 $bad > /dev/null 2> "$dir/err"; then
    fail "bench forward $bad should fail"
  fi
  grep -q "must be >= " "$dir/err" || { cat "$dir/err"; fail "bench forward $bad: no clear message"; }
done
echo "bench forward CLI: ok"
