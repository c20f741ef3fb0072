// A real EngineBackend over a loaded pair, behind an HttpServer on a free loopback port, ready to serve: what the
// tests that run the batched engine through HTTP (engine_e2e_test.cc, prefix_cache_server_test.cc) start.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/cpu.h"

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

// The shipped pair, loaded once per test suite (one thread), and the engine server a test starts over it with
// start_engine_server; TearDown stops it.
class ShippedPairServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_num_threads(1);
    bundle_ = new ModelBundle(ModelBundle::load(std::string(TS_SOURCE_DIR) + "/models/treespark-target",
                                                std::string(TS_SOURCE_DIR) + "/models/treespark-drafter"));
  }
  static void TearDownTestSuite() {
    delete bundle_;
    bundle_ = nullptr;
  }
  void stop() {
    if (server_) server_->stop();
    server_.reset();
    backend_.reset();
  }
  void TearDown() override { stop(); }

  inline static ModelBundle* bundle_ = nullptr;
  std::unique_ptr<EngineBackend> backend_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

}  // namespace ts::server::testing
