#!/usr/bin/env bash
# Sampling through `treespark serve` on the shipped pair, across two starts of the server with the same
# configuration (TreeSpark trees, the load-adaptive policy priced from one cost curve, --deterministic-trees):
# a seeded T > 0 request returns the same text and ids from both starts, and from a replay of the seed an unseeded
# request reported; unseeded requests differ from each other; a body without sampling fields samples as the shipped
# generation_config.json says (start-up logs those defaults); a greedy request's logprobs through the server
# (speculating) equal `treespark generate --mode none --logprobs`.
# Usage: seeded_test.sh TREESPARK_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/serve_test_lib.sh" "$@"
for start in 1 2; do
  start_serve "$work/serve$start.log" --model "$src/models/treespark-target" \
    --drafter "$src/models/treespark-drafter" --threads 1 --max-batch 2 --max-context 1024 \
    --cost-curve "$src/tests/data/server/cost_curve.json" --deterministic-trees
  "$py" - "$port" "$work/start$start.json" "$bin" "$src" <<'PY'
import http.client, json, subprocess, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    assert r.status == 200, data
    return data
deadline = time.time() + 120
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200: break
    except (ConnectionRefusedError, ConnectionResetError):
        pass
    assert time.time() < deadline, "server never became healthy"
    time.sleep(0.05)
results = {"seeded": [], "unseeded": []}
for i, prompt in enumerate(["def fibonacci(n):\n", "The history of the city", "Once upon a time"]):
    d = post({"prompt": prompt, "max_tokens": 48, "temperature": 1.0, "seed": 1000 + i, "return_token_ids": True})
    assert d["seed"] == 1000 + i
    results["seeded"].append(d["choices"][0]["token_ids"])
for _ in range(2):
    d = post({"prompt": "Once upon a time", "max_tokens": 48, "temperature": 1.0, "return_token_ids": True})
    replay = post({"prompt": "Once upon a time", "max_tokens": 48, "temperature": 1.0, "seed": d["seed"],
                   "return_token_ids": True})
    assert replay["choices"][0]["token_ids"] == d["choices"][0]["token_ids"], "replaying seed %d differs" % d["seed"]
    results["unseeded"].append(d["choices"][0]["token_ids"])
assert results["unseeded"][0] != results["unseeded"][1], "two unseeded samples are identical"
# The shipped generation_config.json (temperature 0.7, top_p 0.9, top_k 20) fills the fields a body leaves out.
ids = lambda d: d["choices"][0]["token_ids"]
body = {"prompt": "Once upon a time", "max_tokens": 32, "seed": 7, "return_token_ids": True}
by_default = post(body)
assert ids(by_default) == ids(post(dict(body, temperature=0.7, top_p=0.9, top_k=20))), "defaults are not the file's"
assert ids(by_default) != ids(post(dict(body, temperature=1.0, top_p=1, top_k=-1))), "defaults look like OpenAI's"
# Logprobs of a speculative greedy request (trees) against `generate --mode none --logprobs`: same tokens, same
# values (the server prints the float's double, generate its shortest form: compare to float rounding).
bin, src = sys.argv[3], sys.argv[4]
d = post({"prompt": "def fibonacci(n):\n", "max_tokens": 24, "temperature": 0, "logprobs": 3, "return_token_ids": True})
gen_out = subprocess.run([bin, "generate", "--model", src + "/models/treespark-target", "--prompt", "def fibonacci(n):\n",
                      "--mode", "none", "--temperature", "0", "--max-tokens", "24", "--threads", "1", "--logprobs", "3",
                      "--json"], check=True, capture_output=True, text=True).stdout
plain = json.loads(gen_out.splitlines()[-1])
assert d["choices"][0]["token_ids"] == plain["ids"]
lp = d["choices"][0]["logprobs"]
assert len(lp["token_logprobs"]) == len(plain["logprobs"]) == 24
for got, want in zip(lp["token_logprobs"], plain["logprobs"]):
    assert abs(got - want["logprob"]) <= 1e-6 * max(1, abs(want["logprob"])), (got, want)
for got, want in zip(lp["top_logprobs"], plain["logprobs"]):
    assert sorted(round(v, 5) for v in got.values()) == sorted(round(v, 5) for _, v in want["top"]), (got, want)
results["logprobs"] = lp["token_logprobs"]
json.dump(results, open(out, "w"))
print("start: 3 seeded samples; 2 unseeded samples differ and replay from their returned seeds; a body without "
      "sampling fields samples with generation_config.json's; greedy tree logprobs equal generate --mode none's")
PY
  kill -TERM "$pid"
  wait "$pid"
  pid=
  grep -q "sampling defaults from generation_config.json" "$work/serve$start.log"
done
"$py" - "$work/start1.json" "$work/start2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for i, (x, y) in enumerate(zip(a["seeded"], b["seeded"])):
    assert x == y, "seeded sample %d differs between two server starts:\n%s\n%s" % (i, x, y)
print("seeded samples repeat across two server starts (3 prompts x 48 tokens, T = 1)")
PY
echo "seeded test: ok"
