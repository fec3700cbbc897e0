// File: coordinator/service.h
//
// CoordinatorService puts a Coordinator on the network: it registers one thin
// handler per request type on an RpcServer (each forwards to a Coordinator
// method) and runs the liveness check every `liveness_interval`.
//
// Thread-safety: Start/Stop from one thread; handlers run on RpcServer workers.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/coordinator.h"
#include "proto/rpc_server.h"

namespace hoard {

class CoordinatorService {
 public:
  struct Options {
    std::string endpoint;  // where to listen, e.g. tcp://127.0.0.1:7100
    // Enough that walks in progress (Coordinator::Options::max_concurrent_adds)
    // never leave heartbeats without a worker.
    int workers = 8;
    std::chrono::milliseconds liveness_interval{500};
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    Clock* clock = Clock::Real();  // paces the liveness checks
  };

  CoordinatorService(Coordinator* coordinator, Options options);
  ~CoordinatorService();

  Status Start();
  void Stop();
  const std::string& endpoint() const { return server_.bound_endpoint(); }

 private:
  void RegisterHandlers();
  void RegisterCheckpointHandlers();

  Coordinator* coordinator_;
  Options options_;
  proto::RpcServer server_;
  std::thread liveness_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace hoard
