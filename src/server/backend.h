// What the HTTP server needs from whatever generates tokens, in the engine's own vocabulary: submit a Request
// (engine/request.h), receive its RequestEvents, cancel it, drain, and read an EngineMetrics snapshot
// (engine/metrics.h). The server (http_server.h) speaks only to this interface, so it is tested with a fake
// backend over real HTTP; the batched step engine plugs in through EngineBackend (engine_backend.h), a thin
// forwarder to AsyncEngine. No transport code lives behind this line, and no model code in front of it; no type
// is copied across it.
//
// Contract (AsyncEngine's, async_engine.h):
//   - submit() never blocks on generation. It either accepts the request (SubmitResult::ok(); the callback then
//     receives RequestEvents, the last with finish != None exactly once, even after cancel()) or refuses it with a
//     RejectReason and a message, and then the callback is never called.
//   - The callback runs on a backend thread, one event at a time per request, in order. It must be cheap and must
//     not throw or block (the server copies the event into the request's channel and returns). An event's `stats`
//     pointer is valid only during the callback; the final event may carry tokens too.
//   - cancel(id) is idempotent and safe for an id that already finished; the request's slot and KV are released
//     before its final event (FinishReason::Cancelled) is sent.
//   - A request that fails (an exception inside the backend) ends with FinishReason::Error; the others keep running.
#pragma once

#include "engine/metrics.h"
#include "engine/request.h"

namespace ts::server {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual SubmitResult submit(Request request, EventCallback on_event) = 0;
  virtual void cancel(RequestId id) = 0;
  // Refuses new submits (RejectReason::Draining) and blocks until every accepted request has sent its final event.
  virtual void drain() = 0;
  // A point-in-time snapshot: gauges, counters that only grow, and the policy's latest step (last_step).
  virtual EngineMetrics metrics() const = 0;
};

}  // namespace ts::server
