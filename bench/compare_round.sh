#!/usr/bin/env bash
# Before/after comparison of `bench round`: builds bench/bench_round.cc of this checkout against the libraries of
# an older build (configured and built from the older commit: cmake --preset release && cmake --build ... --target
# treespark), then runs the old and the new binary alternately, prompt set by prompt set, so both see the same
# machine load.
#   bench/compare_round.sh OLD_SOURCE_DIR OLD_BUILD_DIR NEW_TREESPARK [bench round flags...]
# OLD_SOURCE_DIR: the older checkout (its src/ and tools/cli/ headers); OLD_BUILD_DIR: its build with libts_*.a.
set -euo pipefail
old_src=$1 old_build=$2 new_bin=$3
shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
old_bin=$old_build/bench_round_old
c++ -O2 -DNDEBUG -fopenmp -std=gnu++20 -DTS_BENCH_ROUND_MAIN -I"$old_src/tools/cli" -I"$here/bench" \
  -I"$old_src/src" "$here/bench/bench_round.cc" "$old_src/tools/cli/prompt_file.cc" \
  "$old_build"/libts_engine.a "$old_build"/libts_spec.a "$old_build"/libts_model.a "$old_build"/libts_io.a \
  "$old_build"/libts_kernels.a -ldnnl "$old_build"/libts_sampling.a "$old_build"/libts_tokenizer.a \
  "$old_build"/libts_core.a -lgomp -lpthread -lpcre2-8 -licuuc -licudata -o "$old_bin"
for pass in 1 2; do
  echo "== pass $pass: old"; "$old_bin" "$@"
  echo "== pass $pass: new"; "$new_bin" bench round "$@"
done
