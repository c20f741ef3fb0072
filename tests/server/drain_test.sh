#!/usr/bin/env bash
# treespark serve end to end on the shipped pair: /health goes 503 -> 200, greedy output through the server equals
# `treespark generate` greedy output token for token (tree mode vs the target alone), a streaming request runs, SIGTERM
# arrives mid-stream: new requests get 503 with Retry-After, the running stream still finishes with [DONE], and the
# process exits 0. Then a second server with --drain-timeout 0.5, a client dripping a header and a long stream: on
# SIGTERM the stream is cancelled at the deadline and the process exits within the drain timeout + 1 s.
# Usage: drain_test.sh TREESPARK_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/serve_test_lib.sh" "$@"
start_serve "$work/serve.log" --model "$src/models/treespark-target" --drafter "$src/models/treespark-drafter" \
  --fixed-theta --threads 1 --max-batch 2 --max-context 1024
"$py" - "$port" "$pid" "$bin" "$src" <<'PY'
import http.client, json, os, signal, subprocess, sys, threading, time
port, pid, bin, src = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]

def request(method, path, body=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    return c, c.getresponse()

deadline = time.time() + 120
saw_503 = False
while True:
    try:
        _, r = request("GET", "/health")
        r.read()
        if r.status == 200: break
        assert r.status == 503, r.status
        saw_503 = True
    except (ConnectionRefusedError, ConnectionResetError):
        pass
    assert time.time() < deadline, "server never became healthy"
    time.sleep(0.05)
print("health: ok (saw 503 while loading: %s)" % saw_503)

# Greedy identity with the CLI: the server speculates (tree), generate runs the target alone.
for prompt in ["def fibonacci(n):\n", "The history of the city"]:
    _, r = request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 32, "temperature": 0,
                                               "return_token_ids": True})
    served = json.loads(r.read())["choices"][0]["token_ids"]
    out = subprocess.run([bin, "generate", "--model", src + "/models/treespark-target", "--prompt", prompt,
                          "--mode", "none", "--temperature", "0", "--max-tokens", "32", "--threads", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    want = json.loads(out.splitlines()[-1])["ids"]
    assert served == want, "prompt %r: server %s != generate %s" % (prompt, served, want)
print("greedy: server (tree) == treespark generate (target alone) on 2 prompts x 32 tokens")

# A long streaming request; SIGTERM goes out once its first chunk arrived.
c, r = request("POST", "/v1/completions", {"prompt": "def main():\n", "max_tokens": 900, "temperature": 0,
                                           "stream": True, "stream_options": {"include_usage": True}}, timeout=300)
assert r.status == 200, r.status
first = r.readline()  # decoded through the chunked framing
os.kill(pid, signal.SIGTERM)
t_term = time.time()
statuses = []
for _ in range(40):
    try:
        c2, r2 = request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout=10)
        body = r2.read()
        statuses.append(r2.status)
        if r2.status == 503:
            err = json.loads(body)["error"]
            assert err["code"] == "draining", err
            assert r2.getheader("Retry-After") == "1"
            break
    except ConnectionRefusedError:
        statuses.append("refused")
        break
    except (ConnectionResetError, BrokenPipeError):  # connected as the drain began: idle connections are
        statuses.append("reset")                     # closed then (a reset, or a pipe broken while sending)
    time.sleep(0.01)
rest = first + r.read()
t_done = time.time()
events = [l[6:] for l in rest.decode().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-3:]
usage = json.loads(events[-2])["usage"]
fin = [json.loads(e) for e in events[:-1] if json.loads(e)["choices"]][-1]["choices"][0]["finish_reason"]
print("after SIGTERM: new requests -> %s; the running stream finished (%s, %d tokens) %.2f s later"
      % (statuses, fin, usage["completion_tokens"], t_done - t_term))
assert 503 in statuses, "no 503 while draining: %s" % statuses
assert fin in ("stop", "length"), fin
PY
rc=0
wait "$pid" || rc=$?
pid=
cat "$work/serve.log" >&2
[ "$rc" -eq 0 ] || { echo "serve exited $rc after SIGTERM" >&2; exit 1; }

start_serve "$work/serve2.log" --model "$src/models/treespark-target" --drafter "$src/models/treespark-drafter" \
  --mode none --threads 1 --max-batch 2 --max-context 1024 --drain-timeout 0.5
"$py" - "$port" "$pid" <<'PY'
import http.client, json, os, signal, socket, sys, threading, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 120
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200: break
    except (ConnectionRefusedError, ConnectionResetError):
        pass
    assert time.time() < deadline, "second server never became healthy"
    time.sleep(0.05)
slow = socket.create_connection(("127.0.0.1", port))
slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
stop_drip = threading.Event()
def drip():
    while not stop_drip.is_set():
        try: slow.sendall(b"X-Drip: 1\r\n")
        except OSError: return
        time.sleep(0.3)
threading.Thread(target=drip, daemon=True).start()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
c.request("POST", "/v1/completions", body=json.dumps({"prompt": "def main():\n", "max_tokens": 1000,
          "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}),
          headers={"Content-Type": "application/json"})
r = c.getresponse()
first = r.readline()
os.kill(pid, signal.SIGTERM)
t_term = time.time()
rest = (first + r.read()).decode()
events = [l[6:] for l in rest.split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-3:]
fin = [json.loads(e) for e in events[:-1] if json.loads(e)["choices"]][-1]["choices"][0]["finish_reason"]
def running():  # the process is not our child: it stays a zombie until the shell waits for it
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
while running():
    assert time.time() - t_term < 1.5, "serve still running %.1f s after SIGTERM (drain timeout 0.5 s)" % (time.time() - t_term)
    time.sleep(0.02)
print("drain timeout: stream ended (%s) and serve exited %.2f s after SIGTERM with a header-dripping client attached"
      % (fin, time.time() - t_term))
assert fin == "cancelled", fin
stop_drip.set()
PY
rc=0
wait "$pid" || rc=$?
pid=
cat "$work/serve2.log" >&2
[ "$rc" -eq 0 ] || { echo "serve exited $rc after SIGTERM with --drain-timeout" >&2; exit 1; }
echo "drain test: ok"
