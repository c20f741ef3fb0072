// A real EngineBackend over a loaded pair, behind an HttpServer on a free loopback port, ready to serve: what the
// tests that run the batched engine through HTTP (engine_e2e_test.cc, prefix_cache_server_test.cc) start.
#pragma once

#include <memory>

#include "engine/model_bundle.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/model_setup.h"

namespace ts::server::testing {

// Replaces *backend and *server with fresh ones (an empty engine); returns the bound port.
inline int start_engine_server(const ModelBundle& bundle, const EngineConfig& config, const RequestOptions& defaults,
                               std::unique_ptr<EngineBackend>* backend, std::unique_ptr<HttpServer>* server) {
  *backend = std::make_unique<EngineBackend>(*bundle.target, bundle.drafter.get(), config);
  ServerOptions so;
  so.port = 0;
  so.max_batch = config.max_batch;
  so.max_queue = config.max_queue;
  *server = std::make_unique<HttpServer>(so);
  const int port = (*server)->bind();
  (*server)->start();
  ServedModel served = describe_model(bundle, "treespark-target", (*backend)->max_context());
  served.request_defaults = defaults;
  (*server)->set_ready(**backend, std::move(served));
  return port;
}

}  // namespace ts::server::testing
