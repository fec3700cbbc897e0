// File: coordinator/service.h
//
// CoordinatorService puts a Coordinator on the network: it registers one thin
// handler per request type on an RpcServer (each forwards to a Coordinator
// method) and runs the liveness check every `liveness_interval`.
//
// Standby (issue 32: several coordinators, one leads): while
// Options::standby names a leader, or says none is elected, this service
// answers every request kNotLeader with that leader's endpoint (empty: none
// yet) and runs no liveness check, so a standby changes nothing, not even
// in memory (a mount's Ping is not recorded either). No request is answered
// by a standby itself, not even Ping: a kNotLeader reply already says the
// standby is up and who leads, and a Pong with the standby's epoch would
// make a mount poll the wrong map. proto::LeaderClient follows the answer.
//
// Audit: each request that changes state (coordinator/audit.h) is logged once
// with its sender's key class and claims, after its handler answered.
//
// Thread-safety: Start/Stop from one thread; handlers run on RpcServer workers.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
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
    // Null, or returning nullopt: this coordinator leads and serves. A value:
    // it is a standby, and the value is the leader's endpoint ("" while none
    // is elected). Asked once per request and per liveness round, from any
    // thread: thread-safe and quick (read an atomic state, not etcd).
    std::function<std::optional<std::string>()> standby;
    // Null without HA; else fills ClusterStatusReply::ha (it may ask etcd).
    std::function<proto::HaStatus()> ha_status;
    // Where the audit lines go (coordinator/audit.h); null: a logger named
    // "audit" writing to `logger`'s sinks.
    std::shared_ptr<spdlog::logger> audit_logger;
  };

  CoordinatorService(Coordinator* coordinator, Options options);
  ~CoordinatorService();

  Status Start();
  void Stop();
  const std::string& endpoint() const { return server_.bound_endpoint(); }

 private:
  void RegisterHandlers();
  void RegisterCheckpointHandlers();
  bool IsStandby() const { return options_.standby && options_.standby().has_value(); }

  Coordinator* coordinator_;
  Options options_;
  proto::RpcServer server_;
  std::thread liveness_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace hoard
