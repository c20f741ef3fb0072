#!/usr/bin/env bash
# Builds a fuzzer (libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer, clang++-14) straight from the
# sources it tests, then runs it for a bounded time from a small seed corpus. TARGET is safetensors (the header
# parser; generated seeds), gguf (the GGUF reader; seeds are the gguf-py fixtures in tests/data/gguf plus a few
# near misses) or request (the server's OpenAI request parser and prompt preparation, tests/server/fuzz; seeds
# are request bodies). Fails when the toolchain is missing (install it with scripts/install-deps.sh) or when the fuzzer
# finds anything.
#
# usage: run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS] [TARGET]   (TS_FUZZ_TIMEOUT: seconds one input may take, default 10)
set -euo pipefail
export LC_ALL=C

src=$(cd "$1" && pwd)
seconds="${3:-20}"
target="${4:-safetensors}"
case "$target" in safetensors|gguf|request) ;; *) echo "run_fuzz.sh: unknown target '$target'" >&2; exit 2 ;; esac
work="$2/fuzz_$target"
cxx="${TS_FUZZ_CXX:-clang++-14}"

fail() { echo "run_fuzz.sh: ERROR: $*" >&2; exit 1; }

command -v "$cxx" >/dev/null || fail "$cxx not found: install clang-14 and libclang-rt-14-dev (scripts/install-deps.sh)"
runtime="$("$cxx" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a"
[ -f "$runtime" ] || fail "libFuzzer runtime $runtime missing: install libclang-rt-14-dev (scripts/install-deps.sh)"

mkdir -p "$work/corpus" "$work/seeds"
bin="$work/fuzz_$target"
# The core files io needs (not src/core/*.cc: other core files may need OpenMP or other flags).
core=("$src/src/core/error.cc" "$src/src/core/dtype.cc" "$src/src/core/mapped_file.cc")
libs=()
if [ "$target" = request ]; then
  sources=("$src/src/server/openai_request.cc" "$src"/src/tokenizer/*.cc "${core[@]}"
           "$src/tests/server/fuzz/fuzz_request.cc")
  headers=("$src"/src/server/*.h "$src"/src/tokenizer/*.h "$src"/src/core/*.h)
  libs=(-lpcre2-8 -licuuc -DTS_SOURCE_DIR="\"$src\"")
  dict="$src/tests/server/fuzz/request.dict"
else
  sources=("$src"/src/io/*.cc "${core[@]}" "$src/tests/io/fuzz/fuzz_$target.cc")
  headers=("$src"/src/io/*.h "$src"/src/core/*.h)
  dict="$src/tests/io/fuzz/$target.dict"
fi

stale=0
[ -x "$bin" ] || stale=1
for f in "${sources[@]}" "${headers[@]}" "$0"; do [ "$f" -nt "$bin" ] && stale=1; done
if [ "$stale" = 1 ]; then
  echo "building $bin"
  nice -n 10 "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -I "$src/src" -I "$src/include" "${sources[@]}" "${libs[@]}" -o "$bin.tmp" \
    || fail "building the fuzzer failed (is libclang-rt-14-dev installed?)"
  mv "$bin.tmp" "$bin"
fi

# safetensors seeds: a few valid files and near misses. 8-byte little-endian header length, header, data.
seed() {  # name header data_bytes
  local n=${#2}
  {
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((n & 255)) $(((n >> 8) & 255)) $(((n >> 16) & 255)) 0)"
    printf '\0\0\0\0'
    printf '%s' "$2"
    head -c "$3" /dev/zero | tr '\0' '\101'
  } > "$work/seeds/$1"
}
if [ "$target" = safetensors ]; then
seed one_f32 '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
seed two '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[1],"data_offsets":[8,10]}}' 10
seed empty_tensor '{"e":{"dtype":"U8","shape":[0,3],"data_offsets":[0,0]},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}  ' 8
seed overlap '{"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}}' 8
seed duplicate '{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}}' 2
seed empty_header '{}' 0
elif [ "$target" = request ]; then
  # request seeds: the first byte picks the endpoint (odd: chat), the rest is the body.
  printf '0{"prompt": "Hello", "max_tokens": 4, "temperature": 0.5, "stop": ["\\n"], "seed": 3}' > "$work/seeds/completion"
  printf '0{"prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}}' > "$work/seeds/ids"
  printf '1{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_completion_tokens": 8, "chat_template_kwargs": {"enable_thinking": false}}' > "$work/seeds/chat"
  printf '1{"messages": [{"role": "assistant", "content": null, "tool_calls": []}, {"role": "tool", "content": "x"}]}' > "$work/seeds/roles"
  printf '0{"prompt": [[[[[[[[[[[[[[[["a"]]]]]]]]]]]]]]]]}' > "$work/seeds/nested"
else
  # gguf seeds: the gguf-py fixtures (every value type, nested arrays, six tensor types, alignment 64) and an
  # empty v3 file ("GGUF", u32 version, u64 tensor count 0, u64 key count 0).
  cp "$src"/tests/data/gguf/*.gguf "$work/seeds/"
  printf 'GGUF\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' > "$work/seeds/empty"
fi

echo "fuzzing for ${seconds}s"
status=0
"$bin" -max_total_time="$seconds" -timeout="${TS_FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
  -dict="$dict" -artifact_prefix="$work/" "$work/corpus" "$work/seeds" || status=$?
if [ "$status" != 0 ]; then
  fail "the fuzzer found a problem (exit $status); the input is saved under $work/ (crash-*, leak-*, timeout-*)"
fi
echo "fuzz_$target: no findings"
