#include "server/kv_events.h"

#include <zmq.h>

#include <bit>
#include <cerrno>
#include <chrono>

#include "core/error.h"

namespace ts::server {

namespace {

// The msgpack writer for the few types a KVEventBatch holds, each value in its smallest encoding
// (https://github.com/msgpack/msgpack/blob/master/spec.md). Multi-byte lengths and numbers are big-endian.
class MsgpackWriter {
 public:
  std::string& bytes() { return out_; }

  void nil() { byte(0xc0); }

  void uint(uint64_t v) {
    if (v < 0x80) {
      byte(uint8_t(v));  // positive fixint
    } else if (v <= 0xff) {
      byte(0xcc);
      be(v, 1);
    } else if (v <= 0xffff) {
      byte(0xcd);
      be(v, 2);
    } else if (v <= 0xffffffffu) {
      byte(0xce);
      be(v, 4);
    } else {
      byte(0xcf);
      be(v, 8);
    }
  }

  void sint(int64_t v) {
    if (v >= 0) return uint(uint64_t(v));  // msgspec writes non-negative ints as unsigned
    if (v >= -32) {
      byte(uint8_t(int8_t(v)));  // negative fixint 0xe0..0xff
    } else if (v >= INT8_MIN) {
      byte(0xd0);
      be(uint64_t(v), 1);
    } else if (v >= INT16_MIN) {
      byte(0xd1);
      be(uint64_t(v), 2);
    } else if (v >= INT32_MIN) {
      byte(0xd2);
      be(uint64_t(v), 4);
    } else {
      byte(0xd3);
      be(uint64_t(v), 8);
    }
  }

  void float64(double v) {
    byte(0xcb);
    be(std::bit_cast<uint64_t>(v), 8);
  }

  void str(const std::string& s) {
    const uint64_t n = s.size();
    if (n < 32) {
      byte(uint8_t(0xa0 | n));  // fixstr
    } else if (n <= 0xff) {
      byte(0xd9);
      be(n, 1);
    } else if (n <= 0xffff) {
      byte(0xda);
      be(n, 2);
    } else {
      byte(0xdb);
      be(n, 4);
    }
    out_ += s;
  }

  void array(uint64_t n) {
    if (n < 16) {
      byte(uint8_t(0x90 | n));  // fixarray
    } else if (n <= 0xffff) {
      byte(0xdc);
      be(n, 2);
    } else {
      TS_CHECK(n <= 0xffffffffu, "msgpack: an array of ", n, " elements");
      byte(0xdd);
      be(n, 4);
    }
  }

 private:
  void byte(uint8_t b) { out_.push_back(char(b)); }
  // The low `n` bytes of v, most significant first.
  void be(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) byte(uint8_t(v >> (8 * i)));
  }

  std::string out_;
};

// vLLM's `medium` for blocks held in host memory.
constexpr const char* kMedium = "CPU";

void write_event(MsgpackWriter& w, const KvCacheEvent& e) {
  switch (e.kind) {
    case KvCacheEvent::Kind::BlockStored:
      w.array(7);
      w.str("BlockStored");
      w.array(e.block_hashes.size());
      for (uint64_t h : e.block_hashes) w.uint(h);
      if (e.parent_block_hash) {
        w.uint(*e.parent_block_hash);
      } else {
        w.nil();
      }
      w.array(e.token_ids.size());
      for (int32_t t : e.token_ids) w.sint(t);
      w.sint(e.block_size);
      w.nil();  // lora_id: no adapters
      w.str(kMedium);
      return;
    case KvCacheEvent::Kind::BlockRemoved:
      w.array(3);
      w.str("BlockRemoved");
      w.array(e.block_hashes.size());
      for (uint64_t h : e.block_hashes) w.uint(h);
      w.str(kMedium);
      return;
    case KvCacheEvent::Kind::AllBlocksCleared:
      w.array(1);
      w.str("AllBlocksCleared");
      return;
  }
  TS_FAIL("KV event of unknown kind ", int(e.kind));
}

std::string zmq_error() { return zmq_strerror(zmq_errno()); }

}  // namespace

std::string encode_kv_event_batch(double ts, const std::vector<KvCacheEvent>& events) {
  MsgpackWriter w;
  w.array(2);  // [ts, events]; data_parallel_rank stays at its default and is omitted
  w.float64(ts);
  w.array(events.size());
  for (const KvCacheEvent& e : events) write_event(w, e);
  return std::move(w.bytes());
}

KvEventPublisher::KvEventPublisher(const std::string& endpoint, std::string topic) : topic_(std::move(topic)) {
  context_ = zmq_ctx_new();
  TS_CHECK(context_, "KV events: cannot create a ZeroMQ context for '", endpoint, "': ", zmq_error());
  socket_ = zmq_socket(context_, ZMQ_PUB);
  const int linger_ms = 0, hwm = kSendHighWaterMark;
  std::string failure;
  if (!socket_) {
    failure = cat("cannot create a ZeroMQ PUB socket: ", zmq_error());
  } else if (zmq_setsockopt(socket_, ZMQ_LINGER, &linger_ms, sizeof linger_ms) != 0 ||
             zmq_setsockopt(socket_, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0) {
    failure = cat("cannot set socket options: ", zmq_error());
  } else if (zmq_bind(socket_, endpoint.c_str()) != 0) {
    failure = cat("cannot bind a ZeroMQ PUB socket there: ", zmq_error());
  } else {
    char bound[256] = {};
    size_t size = sizeof bound;
    endpoint_ = zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, bound, &size) == 0 ? std::string(bound) : endpoint;
  }
  if (!failure.empty()) {
    if (socket_) zmq_close(socket_);
    zmq_ctx_term(context_);
    TS_FAIL("KV events on '", endpoint, "': ", failure);
  }
}

KvEventPublisher::~KvEventPublisher() {
  zmq_close(socket_);     // linger 0: queued messages are discarded
  zmq_ctx_term(context_);
}

void KvEventPublisher::publish(const std::vector<KvCacheEvent>& events) {
  if (events.empty()) return;
  const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string payload = encode_kv_event_batch(ts, events);
  std::lock_guard<std::mutex> lock(mutex_);
  const bool ok = send_message(payload, next_sequence_++);
  (ok ? sent_ : dropped_).fetch_add(1, std::memory_order_relaxed);
}

bool KvEventPublisher::send_message(const std::string& payload, int64_t sequence) {
  char seq[8];
  for (int i = 0; i < 8; ++i) seq[i] = char(uint64_t(sequence) >> (8 * (7 - i)));
  auto send = [&](const void* data, size_t size, int more) {
    for (;;) {
      if (zmq_send(socket_, data, size, ZMQ_DONTWAIT | more) >= 0) return true;
      if (zmq_errno() != EINTR) return false;
    }
  };
  // A PUB socket queues a multipart message whole or not at all once its first frame is accepted.
  return send(topic_.data(), topic_.size(), ZMQ_SNDMORE) && send(seq, sizeof seq, ZMQ_SNDMORE) &&
         send(payload.data(), payload.size(), 0);
}

}  // namespace ts::server
