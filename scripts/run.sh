#!/usr/bin/env bash
# The main job: TreeSpark speculative decoding on the shipped model pair (models/), on a chat prompt, printing the
# text and its statistics, then the same prompt with the target alone for comparison. Installs what it needs,
# builds the release preset. Without a shipped pair (an early checkout) it generates a small random-weight pair.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release >/dev/null
bin=build/release/treespark
target=models/treespark-target
drafter=models/treespark-drafter
prompt="${1:-Write a Python function that returns the n-th Fibonacci number.}"
code_prompt='def fibonacci(n):
    """Return the n-th Fibonacci number."""
'
if [ -f "$target/model.safetensors" ] && [ -f "$drafter/model.safetensors" ]; then
  echo "== TreeSpark on the shipped pair, chat prompt, temperature 0.7 =="
  echo "   (a 4M-parameter model trained for 45 minutes: expect plausible-looking, incoherent text)"
  "$bin" generate --model "$target" --drafter "$drafter" --mode tree --chat --no-thinking --prompt "$prompt" \
    --temperature 0.7 --seed 1 --max-tokens 120
  echo
  echo "== greedy (--temperature 0 overrides generation_config.json), code prompt: TreeSpark, then the target alone (the texts are identical: lossless) =="
  "$bin" generate --model "$target" --drafter "$drafter" --mode tree --prompt "$code_prompt" --temperature 0 --max-tokens 96
  "$bin" generate --model "$target" --mode none --prompt "$code_prompt" --temperature 0 --max-tokens 96
else
  echo "(no shipped pair under models/: using a random-weight pair; output is meaningless, the mechanics are real)"
  "$bin" make-model --out build/demo/target --drafter-out build/demo/drafter >/dev/null
  "$bin" generate --model build/demo/target --drafter build/demo/drafter --prompt-ids 1,2,3,4 --max-tokens 64
fi
