// KV-cache events in vLLM's wire format (server/kv_events.h): the msgpack payload decoded by an independent
// decoder (Python's msgpack, which must also re-encode it to the same bytes: every value in its smallest
// encoding), exact bytes of small batches worked out by hand from the msgpack spec, the three-frame ZeroMQ
// messages a SUB socket receives, and a bad endpoint refused by name.
#include "server/kv_events.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"

namespace ts::server {
namespace {

using nlohmann::json;

KvCacheEvent stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent, std::vector<int32_t> tokens,
                    int block_size) {
  KvCacheEvent e;
  e.kind = KvCacheEvent::Kind::BlockStored;
  e.block_hashes = std::move(hashes);
  e.parent_block_hash = parent;
  e.token_ids = std::move(tokens);
  e.block_size = block_size;
  return e;
}

KvCacheEvent removed(std::vector<uint64_t> hashes) {
  KvCacheEvent e;
  e.kind = KvCacheEvent::Kind::BlockRemoved;
  e.block_hashes = std::move(hashes);
  return e;
}

KvCacheEvent cleared() {
  KvCacheEvent e;
  e.kind = KvCacheEvent::Kind::AllBlocksCleared;
  return e;
}

std::string hex(const std::string& bytes) {
  std::string out;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

// Python's msgpack reads `payload` and prints {"value": the decoded value, "ts_type": the type of its first
// element, "same_bytes": whether packing the value again gives `payload` byte for byte}.
json python_decode(const std::string& payload) {
  char path[] = "/tmp/ts_kv_events_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  if (fd < 0) return {};
  ::close(fd);
  std::ofstream(path, std::ios::binary) << payload;
  const std::string script =
      "import json, msgpack, sys\n"
      "data = open(sys.argv[1], 'rb').read()\n"
      "value = msgpack.unpackb(data, raw=False, strict_map_key=False)\n"
      "print(json.dumps({'value': value, 'ts_type': type(value[0]).__name__,\n"
      "                  'same_bytes': msgpack.packb(value, use_bin_type=True) == data}))\n";
  const std::string command = "/usr/bin/python3 -c \"$TS_KV_SCRIPT\" " + std::string(path) + " 2>&1";
  ::setenv("TS_KV_SCRIPT", script.c_str(), 1);
  std::string out;
  if (std::FILE* pipe = ::popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
    const int status = ::pclose(pipe);
    EXPECT_EQ(status, 0) << "python3 msgpack decoder failed (scripts/install-deps.sh installs python3-msgpack):\n"
                         << out;
  }
  ::unlink(path);
  return json::parse(out, nullptr, /*allow_exceptions=*/false);
}

constexpr uint64_t kHigh = 0x8000000000000001ull;  // >= 2^63: must travel as msgpack uint64, not int64

TEST(KvEvents, BatchDecodesToVllmSchema) {
  std::vector<int32_t> tokens;  // 20 tokens (an array16), across msgpack's unsigned widths
  for (int32_t t : {0, 1, 127, 128, 255, 256, 65535, 65536, INT32_MAX, 42}) tokens.push_back(t), tokens.push_back(t);
  std::vector<int32_t> negative = {-1, -32, -33, -128, -129, -32768, -32769, INT32_MIN};  // the signed widths
  const std::vector<KvCacheEvent> events = {
      stored({1, kHigh, 0xffffffffull, 0x100000000ull, 300}, std::nullopt, tokens, 4),
      stored({7}, kHigh, negative, 8),
      removed({5, UINT64_MAX, 0}),
      cleared(),
  };
  const double ts = 1700000000.25;
  const std::string payload = encode_kv_event_batch(ts, events);
  const json got = python_decode(payload);
  ASSERT_TRUE(got.is_object()) << hex(payload);

  const json expected = json::array({
      ts,
      json::array({
          json::array({"BlockStored", json::array({1, kHigh, 0xffffffffull, 0x100000000ull, 300}), nullptr,
                       json(tokens), 4, nullptr, "CPU"}),
          json::array({"BlockStored", json::array({7}), kHigh, json(negative), 8, nullptr, "CPU"}),
          json::array({"BlockRemoved", json::array({5, UINT64_MAX, 0}), "CPU"}),
          json::array({"AllBlocksCleared"}),
      }),
  });
  EXPECT_EQ(got["value"], expected) << got["value"].dump();
  EXPECT_EQ(got["ts_type"], "float");
  EXPECT_TRUE(got["same_bytes"].get<bool>()) << "not msgpack's smallest encoding: " << hex(payload);
  EXPECT_EQ(got["value"][1][0][1][1].get<uint64_t>(), kHigh);  // unsigned, not wrapped negative
}

TEST(KvEvents, ExactBytesOfSmallBatches) {
  // [0.5, [["AllBlocksCleared"], ["BlockRemoved", [1], "CPU"]]]
  EXPECT_EQ(hex(encode_kv_event_batch(0.5, {cleared(), removed({1})})),
            "92"                                   // array of 2: ts, events
            "cb3fe0000000000000"                   // float64 0.5
            "92"                                   // 2 events
            "91" "b0" + hex("AllBlocksCleared") +  // [fixstr(16)]
                "93" "ac" + hex("BlockRemoved") +  // [fixstr(12), [1], "CPU"]
                "9101" "a3" + hex("CPU"));
  // [1.0, [["BlockStored", [2^63], 200, [65535, 65536], 2, nil, "CPU"]]]
  EXPECT_EQ(hex(encode_kv_event_batch(1.0, {stored({0x8000000000000000ull}, 200, {65535, 65536}, 2)})),
            "92" "cb3ff0000000000000" "91"
            "97" "ab" + hex("BlockStored") +
                "91" "cf8000000000000000"  // [uint64 2^63]
                "cc" "c8"                  // parent: uint8 200
                "92" "cdffff" "ce00010000" // [uint16 65535, uint32 65536]
                "02" "c0" "a3" + hex("CPU"));
  EXPECT_EQ(hex(encode_kv_event_batch(2.0, {})), "92" "cb4000000000000000" "90");
}

// A SUB socket connected to a publisher; frames of one multipart message at a time.
class Subscriber {
 public:
  Subscriber(const std::string& endpoint, const std::string& topic) {
    context_ = zmq_ctx_new();
    socket_ = zmq_socket(context_, ZMQ_SUB);
    const int linger_ms = 0;
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    zmq_setsockopt(socket_, ZMQ_SUBSCRIBE, topic.data(), topic.size());
    EXPECT_EQ(zmq_connect(socket_, endpoint.c_str()), 0) << endpoint;
  }
  ~Subscriber() {
    zmq_close(socket_);
    zmq_ctx_term(context_);
  }
  // The frames of the next message, or none within timeout_ms. A message the test expects gets a long wait (a
  // loaded or sanitized build can take well over 100 ms to pass one through libzmq's threads); checking that
  // nothing is left needs only a short one.
  static constexpr int kExpected = 5000, kNothingLeft = 100;
  std::vector<std::string> receive(int timeout_ms = kExpected) {
    zmq_setsockopt(socket_, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    std::vector<std::string> frames;
    for (int more = 1; more;) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, socket_, 0) < 0) {
        zmq_msg_close(&msg);
        return frames;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    return frames;
  }

 private:
  void* context_;
  void* socket_;
};

int64_t big_endian_int64(const std::string& b) {
  uint64_t v = 0;
  for (unsigned char c : b) v = (v << 8) | c;
  return int64_t(v);
}

// The batch's timestamp: the float64 after the batch's array header (0x92 0xcb).
double payload_ts(const std::string& payload) {
  uint64_t bits = 0;
  for (int i = 2; i < 10; ++i) bits = (bits << 8) | uint8_t(payload[i]);
  double ts;
  std::memcpy(&ts, &bits, sizeof ts);
  return ts;
}

TEST(KvEvents, PublishesThreeFramesWithIncreasingSequence) {
  const std::string topic = "kv@pod-0@treespark";
  KvEventPublisher publisher("tcp://127.0.0.1:*", topic);
  ASSERT_EQ(publisher.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << publisher.endpoint();
  ASSERT_NE(publisher.endpoint(), "tcp://127.0.0.1:*");
  Subscriber sub(publisher.endpoint(), topic);
  const std::vector<KvCacheEvent> events = {stored({11, kHigh}, 10, {1, 2, 3, 4}, 2), removed({9}), cleared()};

  // PUB/SUB slow joiner: messages published before the subscription reaches the publisher are lost, so publish
  // until one arrives.
  std::vector<std::string> frames;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint64_t published = 0;
  while (frames.empty() && std::chrono::steady_clock::now() < deadline) {
    publisher.publish(events);
    ++published;
    frames = sub.receive(Subscriber::kNothingLeft);  // published again if this one went before the subscription
  }
  ASSERT_EQ(frames.size(), 3u) << "no message within 10 s";
  EXPECT_EQ(frames[0], topic);
  ASSERT_EQ(frames[1].size(), 8u);
  int64_t seq = big_endian_int64(frames[1]);
  EXPECT_GE(seq, 0);
  EXPECT_LT(seq, int64_t(published));
  ASSERT_GE(frames[2].size(), 10u);
  EXPECT_EQ(hex(frames[2].substr(0, 2)), "92cb");
  EXPECT_EQ(frames[2], encode_kv_event_batch(payload_ts(frames[2]), events));
  const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double age_s = now_s - payload_ts(frames[2]);
  EXPECT_GE(age_s, 0);
  EXPECT_LT(age_s, 60);

  // Once one message arrived the subscription is in place: every later one the loop published arrives, in order,
  // then each new message is the next number.
  for (int64_t next = seq + 1; next < int64_t(published); ++next) {
    frames = sub.receive();
    ASSERT_EQ(frames.size(), 3u) << "message " << next << " of the " << published << " the loop published";
    EXPECT_EQ(big_endian_int64(frames[1]), next);
  }
  seq = int64_t(published) - 1;
  for (int i = 0; i < 3; ++i) {
    const std::vector<KvCacheEvent> one = {removed({uint64_t(100 + i)})};
    publisher.publish(one);
    frames = sub.receive();
    ASSERT_EQ(frames.size(), 3u) << "message " << i;
    EXPECT_EQ(big_endian_int64(frames[1]), ++seq);
    EXPECT_EQ(frames[2], encode_kv_event_batch(payload_ts(frames[2]), one));
  }
  publisher.publish({});  // nothing to say: no message
  EXPECT_TRUE(sub.receive(Subscriber::kNothingLeft).empty());
  EXPECT_EQ(publisher.sent(), published + 3);
  EXPECT_EQ(publisher.dropped(), 0u);
}

TEST(KvEvents, PublishFromManyThreadsNumbersEveryMessageOnce) {
  KvEventPublisher publisher("tcp://127.0.0.1:*");
  const std::vector<KvCacheEvent> events = {removed({1})};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) publisher.publish(events);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(publisher.sent() + publisher.dropped(), 800u);
}

TEST(KvEvents, BadEndpointIsRefusedByName) {
  try {
    KvEventPublisher publisher("tcp://nonsense:::");
    FAIL() << "bound tcp://nonsense:::";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tcp://nonsense:::"), std::string::npos) << e.what();
  }
  // A port already bound is refused too, by name.
  KvEventPublisher first("tcp://127.0.0.1:*");
  try {
    KvEventPublisher second(first.endpoint());
    FAIL() << "bound " << first.endpoint() << " twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(first.endpoint()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ts::server
