# Sourced by the `treespark serve` script tests (drain, seeded, kv_events_e2e): their arguments, Debian's Python
# (which has the test's modules), a scratch folder and a server pid that are cleaned up on exit, and a server start
# on a port of its own (start_serve).
# Usage in a test: source "$(dirname "$0")/serve_test_lib.sh" "$@"   (TREESPARK_BINARY SOURCE_DIR)
bin=$1
src=$2
py=/usr/bin/python3
work=$(mktemp -d)
pid=
# On failure the server's state and the end of its log go to stderr (a test whose server misbehaved says how).
serve_log=
cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -n "$pid" ]; then
    if kill -0 "$pid" 2>/dev/null; then echo "serve (pid $pid) still running" >&2; else echo "serve (pid $pid) had exited" >&2; fi
    [ -n "$serve_log" ] && [ -f "$serve_log" ] && { echo "--- end of $serve_log:" >&2; tail -n 40 "$serve_log" >&2; }
  fi
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
# Starts `$bin serve --port 0 ARGS...` in the background (log in LOG) and waits for the port it bound, which it prints
# at start-up: sets pid and port. A port picked here and bound by serve later could meanwhile be taken by another
# test's server (ctest runs them in parallel), and the test would then talk to that one.
start_serve() {
  local log=$1
  shift
  serve_log=$log
  "$bin" serve --port 0 "$@" 2> "$log" &
  pid=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/^treespark serve: listening on http:[/][/][^ ]*:\([0-9][0-9]*\) .*/\1/p' "$log" | head -1)
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "serve exited before it bound a port" >&2; exit 1; }
    sleep 0.05
  done
  cat "$log" >&2
  echo "serve printed no port within 30 s" >&2
  exit 1
}
