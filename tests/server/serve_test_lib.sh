# Sourced by the `treespark serve` script tests (drain, seeded, kv_events_e2e): their arguments, Debian's Python
# (which has the test's modules), a scratch folder and a server pid that are cleaned up on exit, and a free port.
# Usage in a test: source "$(dirname "$0")/serve_test_lib.sh" "$@"   (TREESPARK_BINARY SOURCE_DIR)
bin=$1
src=$2
py=/usr/bin/python3
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
