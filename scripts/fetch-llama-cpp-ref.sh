#!/usr/bin/env bash
# Fetch the llama.cpp source that tools/py/make_quant_fixtures.py takes its references from (ggml-quants.c and
# gguf-py) into the ignored folder .cache/llama.cpp (or DEST, the first argument). npm's node-llama-cpp package
# ships llama.cpp as a git bundle; this packs that package, unpacks the bundle and clones it. Idempotent: a
# checkout already at the pinned commit is left alone. The offline fixture generators read it, and the GGUF
# tokenizer tests write their real-vocabulary files with its gguf-py (they skip without it); the build does not.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.cache/llama.cpp}
package=node-llama-cpp@3.22.1
commit=de3ff815ea7d559ee917f063901b8986f038abc6  # the bundle's HEAD; the committed fixtures come from it

if [ -f "$dest/ggml/src/ggml-quants.c" ] && [ "$(git -C "$dest" rev-parse HEAD 2>/dev/null)" = "$commit" ]; then
  echo "fetch-llama-cpp-ref: $dest is at $commit" >&2
  exit 0
fi
for tool in npm git tar; do
  command -v "$tool" >/dev/null || { echo "fetch-llama-cpp-ref: $tool is needed" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-llama-cpp-ref: fetching $package (about 35 MB)" >&2
(cd "$tmp" && npm pack --silent "$package" >/dev/null) || { echo "fetch-llama-cpp-ref: npm pack $package failed" >&2; exit 1; }
tar -xzf "$tmp"/*.tgz -C "$tmp" package/llama/gitRelease.bundle
rm -rf "$dest.partial" && mkdir -p "$(dirname "$dest")"
git -c advice.detachedHead=false clone --quiet "$tmp/package/llama/gitRelease.bundle" "$dest.partial"
actual=$(git -C "$dest.partial" rev-parse HEAD)
if [ "$actual" != "$commit" ]; then
  echo "fetch-llama-cpp-ref: $package holds llama.cpp $actual, expected $commit" >&2
  rm -rf "$dest.partial"
  exit 1
fi
rm -rf "$dest" && mv "$dest.partial" "$dest"
echo "fetch-llama-cpp-ref: llama.cpp $commit ready in $dest" >&2
