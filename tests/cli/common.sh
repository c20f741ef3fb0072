# Sourced by the CLI test scripts (source common.sh "$@"): $bin, the treespark binary ($1); $dir, a temporary
# directory removed on exit; fail MESSAGE; and a cache of the scripts' own (XDG_CACHE_HOME), so cost curves never
# come from or go to the user's.
set -u
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export XDG_CACHE_HOME="$dir/cache"
