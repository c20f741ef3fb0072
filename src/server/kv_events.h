// The engine's KV-cache events (engine/kv_events.h) on a ZeroMQ PUB socket, in vLLM's wire format, so that
// prefix-aware routers built for vLLM -- llm-d's precise prefix-cache scorer (llm-d-kv-cache, pkg/kvevents,
// VLLMAdapter) and vLLM's own examples/online_serving/kv_events_subscriber.py -- read them unchanged.
//
// The wire format is vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py): each batch is one multipart message
//   [topic (utf-8 bytes), sequence number (8 bytes, big-endian int64: 0, 1, 2, ... per message), payload]
// and the payload is msgspec's msgpack encoding of a KVEventBatch. vLLM declares its structs with
// array_like=True (each struct is a msgpack array of its fields in declaration order), omit_defaults=True (trailing
// fields equal to their default are left out) and, on the events, tag=True (the class name comes first). We write
// the fields of vLLM after PR #19737 added `medium` and before PR #27577 appended `lora_name` (the layout of
// examples/online_serving/kv_events_subscriber.py then; later versions only append optional fields, which
// positional decoders read as absent):
//   KVEventBatch     [ts: float64, events: [event...]]          data_parallel_rank (default None) left out
//   BlockStored      ["BlockStored", block_hashes: [uint...], parent_block_hash: uint | nil, token_ids: [int...],
//                     block_size: int, lora_id: nil, medium: "CPU"]
//   BlockRemoved     ["BlockRemoved", block_hashes: [uint...], medium: "CPU"]
//   AllBlocksCleared ["AllBlocksCleared"]
// Integers take msgpack's smallest encoding (as msgspec writes them), so a hash >= 2^63 is a uint64 (0xcf); floats
// are float64 (0xcb). `medium` names where the blocks live: our KV cache is in host memory, "CPU" as vLLM's CPU
// offloading names it (llm-d lower-cases it to the "cpu" device tier). vLLM PR #42892 (after v0.23) switched the
// events, not the batch, to msgpack maps; llm-d-kv-cache reads both shapes, its releases before that PR only arrays.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/kv_events.h"

namespace ts::server {

// The msgpack payload of one KVEventBatch at `ts` (seconds since the Unix epoch, as vLLM's time.time()).
std::string encode_kv_event_batch(double ts, const std::vector<KvCacheEvent>& events);

// A bound ZeroMQ PUB socket that publishes event batches. publish() never blocks: libzmq queues each message
// for every subscriber up to the send high-water mark and past it drops it for that subscriber (a PUB socket's
// rule); a message libzmq refuses outright counts in dropped(). Either way the sequence number advances, so a
// subscriber sees the gap, which is how vLLM's subscribers detect loss. Thread-safe.
class KvEventPublisher {
 public:
  static constexpr int kSendHighWaterMark = 100000;  // messages queued per subscriber, as vLLM's default hwm

  // Binds to `endpoint` ("tcp://*:5557", "tcp://127.0.0.1:5557", "tcp://127.0.0.1:*" for any free port, ipc://...);
  // throws ts::Error naming the endpoint when libzmq cannot bind it.
  explicit KvEventPublisher(const std::string& endpoint, std::string topic = "");
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // One message for `events` (none for an empty list), stamped with the current time.
  void publish(const std::vector<KvCacheEvent>& events);

  // The address bound, wildcards resolved by libzmq (ZMQ_LAST_ENDPOINT: "tcp://0.0.0.0:5557", the port chosen
  // for "*").
  const std::string& endpoint() const { return endpoint_; }
  const std::string& topic() const { return topic_; }
  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }        // messages handed to libzmq
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }  // messages libzmq refused

 private:
  bool send_message(const std::string& payload, int64_t sequence);  // mutex_ held

  void* context_ = nullptr;  // zmq context, owned
  void* socket_ = nullptr;   // ZMQ_PUB socket, owned; used under mutex_ only (zmq sockets are not thread-safe)
  std::string endpoint_;
  const std::string topic_;
  std::mutex mutex_;
  int64_t next_sequence_ = 0;  // mutex_ held
  std::atomic<uint64_t> sent_{0}, dropped_{0};
};

}  // namespace ts::server
