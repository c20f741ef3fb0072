#!/usr/bin/env bash
# `treespark serve --kv-events` end to end on the shipped pair, read by a ZeroMQ SUB socket as a prefix-aware router
# would (Python's zmq and msgpack, independent of our encoder). A KV budget small enough that the prefix cache must
# evict after a few requests; distinct long prompts, then one repeating an earlier prompt's start. Checked:
#   - every message is [topic, 8-byte big-endian seq, payload], the topic as given, seq 0, 1, 2, ... without gaps;
#   - every payload is a KVEventBatch [ts, [events]] in vLLM's array layout, ts the wall clock;
#   - every BlockStored has block_size 16, 16 tokens per hash, lora_id nil, medium "CPU", a parent that is nil or a
#     block stored before and still held, and hashes not already held;
#   - every stored block's token path (its parents' tokens, then its own) starts some request's prompt + answer;
#   - the first request's blocks are exactly the whole blocks of its prompt (token ids from `treespark tokenize`,
#     which must match the server's prompt_tokens) continued by its generated tokens;
#   - every BlockRemoved hash is held (stored, not yet removed); at least one removal happened;
#   - the repeating request's cached_tokens is what the subscriber's view of the cache predicts (> 0: whole blocks,
#     the unit routers see) plus fewer than a block's more (the leading rows of the held entry after them, which
#     the engine copies and does not announce);
#   - at the end the blocks the subscriber believes held equal /metrics' treespark:prefix_cache_blocks.
# Usage: kv_events_e2e_test.sh TREESPARK_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/serve_test_lib.sh" "$@"
topic=kv@test@treespark
# KV bytes per token row: the target's K and V (20 layers x 4 heads x 64 x bf16 x 2 = 20480) plus the drafter's
# context row (1024): 21504. 12 MiB is 585 rows (num_gpu_blocks 36): a request below (~190-token prompt + 16 tokens
# + 34 tree rows + 8 drafter rows) reserves ~250 of them, so the cache keeps ~21 blocks beside a running request
# while each request leaves ~12: it must evict by the third request.
budget_mb=12
start_serve "$work/serve.log" --model "$src/models/treespark-target" --drafter "$src/models/treespark-drafter" \
  --kv-events "tcp://127.0.0.1:*" --kv-events-topic "$topic" --fixed-theta --threads 1 --max-batch 2 \
  --max-context 1024 --kv-budget-mb "$budget_mb"
# The PUB socket binds a port ZeroMQ picks (a port picked here could be taken before serve binds it); serve prints
# where, before it binds the HTTP port.
zport=$(sed -n 's/^treespark serve: KV-cache events on tcp:[/][/][^ ]*:\([0-9][0-9]*\), topic .*/\1/p' \
  "$work/serve.log" | head -1)
[ -n "$zport" ] || { cat "$work/serve.log" >&2; echo "serve did not say where it publishes KV events" >&2; exit 1; }
status=0
"$py" - "$port" "$zport" "$topic" "$bin" "$src" <<'PY' || status=$?
import http.client, json, struct, subprocess, sys, time
import msgpack, zmq

port, zport, topic, bin, src = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4], sys.argv[5]
B = 16

def request(method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read()

deadline = time.time() + 120
while True:
    try:
        status, _ = request("GET", "/health")
        if status == 200: break
    except (ConnectionRefusedError, ConnectionResetError):
        pass
    assert time.time() < deadline, "server never became healthy"
    time.sleep(0.05)

ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, topic)
# PUB drops messages for subscriptions it has not seen yet: wait until the connection's handshake is done (socket
# monitor), then give the subscription message a moment to reach the publisher, before any event can be sent.
from zmq.utils.monitor import recv_monitor_message
monitor = sub.get_monitor_socket()
sub.connect("tcp://127.0.0.1:%d" % zport)
handshake_deadline = time.time() + 60
while True:
    assert time.time() < handshake_deadline, "the SUB socket never completed its handshake with the publisher"
    if monitor.poll(100) and recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        break
sub.disable_monitor()
monitor.close()
time.sleep(1.0)

def tokenize(text):
    out = subprocess.run([bin, "tokenize", "--tokenizer", src + "/models/treespark-target", "--text", text, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

# The subscriber's model of the server's cache, built from the events alone.
held = {}        # hash -> tokens of its whole path (parents' tokens, then its own)
ever = set()     # every hash ever stored
state = {"seq": 0, "messages": 0, "stored": 0, "removed": 0, "cleared": 0}
contexts = []    # each finished request's prompt + generated token ids

def apply(event):
    kind = event[0]
    if kind == "BlockStored":
        assert len(event) == 7, event
        _, hashes, parent, tokens, block_size, lora_id, medium = event
        assert block_size == B, "block_size %r" % block_size
        assert len(tokens) == B * len(hashes), (len(tokens), len(hashes))
        assert lora_id is None and medium == "CPU", event[5:]
        assert parent is None or parent in held, "parent %r not a held block (stored before: %s)" % (parent, parent in ever)
        path = [] if parent is None else list(held[parent])
        for i, h in enumerate(hashes):
            assert isinstance(h, int) and 0 <= h < 2**64, h
            assert h not in held, "block %d stored again while held" % h
            path = path + tokens[i * B:(i + 1) * B]
            held[h] = path
            ever.add(h)
        state["stored"] += len(hashes)
        return hashes, parent, tokens
    if kind == "BlockRemoved":
        assert len(event) == 3 and event[2] == "CPU", event
        for h in event[1]:
            assert h in held, "removed block %d is not held (stored before: %s)" % (h, h in ever)
            del held[h]
        state["removed"] += len(event[1])
    elif kind == "AllBlocksCleared":
        assert event == ["AllBlocksCleared"], event
        held.clear()
        state["cleared"] += 1
    else:
        raise AssertionError("unknown event %r" % (event,))
    return None

def drain(quiet_s=1.0):
    """Reads messages until none came for quiet_s; returns the BlockStored events among them, in order."""
    stored = []
    while sub.poll(int(quiet_s * 1000)):
        frames = sub.recv_multipart()
        assert len(frames) == 3, "a message of %d frames" % len(frames)
        assert frames[0] == topic, frames[0]
        assert len(frames[1]) == 8, frames[1]
        seq = struct.unpack(">q", frames[1])[0]
        assert seq == state["seq"], "seq %d, expected %d (a gap: lost messages)" % (seq, state["seq"])
        state["seq"] += 1
        state["messages"] += 1
        batch = msgpack.unpackb(frames[2], raw=False)
        assert isinstance(batch, list) and len(batch) == 2, batch
        ts, events = batch
        assert isinstance(ts, float) and abs(ts - time.time()) < 60, ts
        assert events, "an empty batch was published"
        for e in events:
            s = apply(e)
            if s: stored.append(s)
    for h, path in held.items():  # every held path starts some request's prompt + answer
        assert any(c[:len(path)] == path for c in contexts), "block %d holds a path no request had" % h
    return stored

def predicted_hit(ids):
    """Whole blocks of ids the subscriber believes held (a chain from the first block), the last token excluded."""
    held_paths = {tuple(p) for p in held.values()}
    n = 0
    while (n + 1) * B <= len(ids) - 1 and tuple(ids[:(n + 1) * B]) in held_paths: n += 1
    return n * B

def complete(text, max_tokens=16):
    status, body = request("POST", "/v1/completions", {"prompt": text, "max_tokens": max_tokens, "temperature": 0,
                                                       "return_token_ids": True})
    assert status == 200, body
    j = json.loads(body)
    return j["choices"][0]["token_ids"], j["usage"]

topics = ["the history of a harbour town", "how bread is baked in a stone oven", "the life of a honey bee colony",
          "building a wooden sailing boat", "the night sky seen from a mountain", "a journey along a great river"]
def story(i):
    t = topics[i]
    return ("Chapter %d. This is a long account of %s. " % (i + 1, t) +
            "It begins early in the morning, when the light is still grey and the air is cold, and it goes on "
            "through the whole day until the evening. Along the way we will meet many people who know %s well, "
            "listen to their stories, write down the small details they remember, and try to understand why it "
            "matters to them so much. Some of them are old and some are young, but all of them agree that %s is "
            "worth a closer look. Here is what the first of them said:" % (t, t))

prompts = [story(i) for i in range(5)]
first_stored = None
for i, text in enumerate(prompts):
    ids = tokenize(text)
    gen, usage = complete(text)
    assert usage["prompt_tokens"] == len(ids), "treespark tokenize gave %d ids, the server %d" % (len(ids), usage["prompt_tokens"])
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0, "distinct prompt %d found cached tokens" % i
    contexts.append(ids + gen)
    stored = drain()
    if i == 0:
        first_ids, first_gen = ids, gen
        first_stored = stored
print("distinct prompts: %d requests, %d messages, %d blocks stored, %d removed, %d held"
      % (len(prompts), state["messages"], state["stored"], state["removed"], len(held)))

# The first request's blocks: one chain from its first block, the whole blocks of its prompt, then of its answer
# (all but the last generated token, which was never fed back).
assert first_stored, "the first request stored no blocks"
assert first_stored[0][1] is None, "the first block has a parent"
chain_tokens, prev = [], None
for hashes, parent, tokens in first_stored:
    assert parent == prev or prev is None, "the first request's blocks do not form one chain"
    chain_tokens += tokens
    prev = hashes[-1]
context = first_ids + first_gen[:-1]
assert len(chain_tokens) == len(context) // B * B, (len(chain_tokens), len(context))
assert chain_tokens == context[:len(chain_tokens)], "the first request's blocks are not its prompt + answer"
assert len(chain_tokens) > len(first_ids) // B * B, "no block of the first answer was stored"
print("first request: %d blocks = %d prompt tokens + answer tokens" % (len(chain_tokens) // B, len(first_ids)))
assert state["removed"] > 0, "no block was removed: the KV budget did not force evictions"

# A prompt repeating the last request's start: its hit is what the events say the cache holds, plus fewer than a
# block's rows from the entry after those blocks (the repeated text runs into the middle of a held block).
text = prompts[-1][:len(prompts[-1]) * 3 // 4] + " And then, quite suddenly, everything changed."
ids = tokenize(text)
want = predicted_hit(ids)
gen, usage = complete(text)
cached = usage["prompt_tokens_details"]["cached_tokens"]
print("repeated prefix: %d prompt tokens, %d cached (events predicted %d)" % (len(ids), cached, want))
assert want > 0 and want <= cached < want + B, (cached, want)
contexts.append(ids + gen)
stored = drain()
if stored:  # blocks after the shared ones hang off a held block of the earlier chain
    assert stored[0][1] is not None, "the repeating request's new blocks start a fresh chain"

status, body = request("GET", "/metrics")
page = body.decode()
line = [l for l in page.split("\n") if l.startswith("treespark:prefix_cache_blocks{")][0]
assert int(float(line.split()[-1])) == len(held), "metrics hold %s blocks, the events %d" % (line, len(held))
info = [l for l in page.split("\n") if l.startswith("vllm:cache_config_info{")][0]
print("ok: %d messages (seq 0..%d), %d blocks stored, %d removed, %d held; %s"
      % (state["messages"], state["seq"] - 1, state["stored"], state["removed"], len(held), info))
PY
if [ "$status" -ne 0 ]; then
  cat "$work/serve.log" >&2
  exit "$status"
fi
echo "kv events e2e test: ok"
