# Sourced by the CLI test scripts (source common.sh "$@"): $bin, the treespark binary ($1); $dir, a temporary
# directory removed on exit; fail MESSAGE; a cache of the scripts' own (XDG_CACHE_HOME), so cost curves never
# come from or go to the user's; make_quantizable_pair; ids.
set -u
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export XDG_CACHE_HOME="$dir/cache"
# A tiny random target and drafter in $dir/target and $dir/drafter whose matrices every weight format can take
# (inputs of 256 and 512: whole K-quant super-blocks; 16 output groups).
make_quantizable_pair() {
  "$bin" make-model --out "$dir/target" --drafter-out "$dir/drafter" --dtype bf16 --vocab 256 --hidden 256 \
    --intermediate 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 > /dev/null 2>&1 || fail "make-model"
}
# The token ids of `generate --json` output on stdin.
ids() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['ids'])"; }
