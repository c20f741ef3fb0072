#!/usr/bin/env bash
# The main job: TreeSpark speculative decoding on the shipped model pair (models/: a 130 MB Qwen3-architecture target
# and its DSpark drafter), on one chat and one code prompt: each prints TreeSpark's text and statistics, then its
# tok/s beside the target alone's on the same prompt (generate --compare; greedy texts must be identical). Installs
# what it needs, builds the release preset. Without a shipped pair (an early checkout) it generates a small
# random-weight pair.
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
if { [ -f "$target/model.safetensors" ] || [ -f "$target/model.safetensors.index.json" ]; } && [ -d "$drafter" ]; then
  echo "== chat prompt, temperature 0.7: TreeSpark's text, then its speed beside the target alone's (same prompt, seed, sampling) =="
  "$bin" generate --model "$target" --drafter "$drafter" --mode tree --chat --no-thinking --prompt "$prompt" \
    --temperature 0.7 --seed 1 --max-tokens 128 --adaptive-theta --compare
  echo
  echo "== code prompt, greedy (--temperature 0 overrides generation_config.json): TreeSpark's text, then both speeds; the target alone writes the same text (lossless) =="
  "$bin" generate --model "$target" --drafter "$drafter" --mode tree --adaptive-theta --prompt "$code_prompt" --temperature 0 \
    --max-tokens 128 --compare
else
  echo "(no shipped pair under models/: using a random-weight pair; output is meaningless, the mechanics are real)"
  "$bin" make-model --out build/demo/target --drafter-out build/demo/drafter >/dev/null
  "$bin" generate --model build/demo/target --drafter build/demo/drafter --prompt-ids 1,2,3,4 --max-tokens 64
fi
