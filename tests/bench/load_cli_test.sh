#!/bin/bash
# `treespark bench load` end to end: a tiny folder and a GGUF fixture side by side (a row and a JSON entry each,
# with every load timed), --quantize, and a missing file failing with its name.
#   load_cli_test.sh <treespark binary> <source dir>
set -u
bin="$1"
src="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin" make-model --out "$dir/model" --dtype bf16 --vocab 256 --hidden 64 --intermediate 128 --layers 2 \
  --heads 4 --kv-heads 2 --head-dim 16 > /dev/null 2>&1 || fail "make-model"
gguf="$src/tests/data/gguf_model/qwen3_gqa_f32.gguf"
"$bin" bench load --model "$dir/model" "$gguf" --repeats 2 --threads 1 --json "$dir/out.json" > "$dir/stdout" \
  2> "$dir/stderr" || { cat "$dir/stderr"; fail "bench load should run"; }
grep -qE '^model +[0-9.]+ bf16 ' "$dir/stdout" || { cat "$dir/stdout"; fail "no row for the folder"; }
grep -qE '^qwen3_gqa_f32.gguf +[0-9.]+ f32 ' "$dir/stdout" || { cat "$dir/stdout"; fail "no row for the GGUF file"; }
/usr/bin/python3 - "$dir/out.json" <<'PY' || fail "JSON"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert len(r) == 2, r
for m in r:
    assert len(m["ready_ms"]) == 2 and all(t > 0 for t in m["ready_ms"]), m
    assert all(abs(a + b - c) < 1e-6 * c + 1e-3 for a, b, c in zip(m["load_ms"], m["first_token_ms"], m["ready_ms"])), m
    assert m["file_bytes"] > 0, m
PY

"$bin" bench load --model "$dir/model" --quantize q8_0 --repeats 1 --threads 1 > "$dir/stdout" 2> "$dir/stderr" ||
  { cat "$dir/stderr"; fail "--quantize q8_0 should run"; }
grep -qE '^model +[0-9.]+ q8_0 ' "$dir/stdout" || { cat "$dir/stdout"; fail "no q8_0 row"; }

if "$bin" bench load --model "$dir/missing.gguf" --repeats 1 > /dev/null 2> "$dir/err"; then
  fail "a missing file should fail"
fi
grep -q "missing.gguf" "$dir/err" || { cat "$dir/err"; fail "the error should name the file"; }
echo "bench load CLI: ok"
