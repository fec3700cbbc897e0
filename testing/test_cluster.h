// File: testing/test_cluster.h
//
// TestCluster: a coordinator served on loopback ZeroMQ and any number of node
// agents, all in one test process, over one in-memory origin (MemOrigin, with
// its fault injection and read counters). Tests of the node agent and of the
// mount build on it; nothing here is linked into a daemon.
//
//   TestCluster c(tmp.path());
//   ASSERT_TRUE(c.Start().ok());
//   c.origin().AddFile("a", "bytes");
//   NodeAgent* n1 = c.StartAgent("node1");
//   c.coordinator().AddDataset({.name = "ds", .source = c.source()});
//
// Checkpoints are not drained unless DrainCheckpoints() is called before
// Start(): then the coordinator publishes to, and the agents drain to, a
// local directory (DIR/ckpt-origin), as the daemons do by default.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <spdlog/sinks/null_sink.h>

#include "origin/ckpt_origin.h"
#include "common/file_util.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "node/node_agent.h"
#include "testing/forwarding_origin.h"
#include "testing/mem_origin.h"

namespace hoard::testing {

class TestCluster {
 public:
  explicit TestCluster(std::string dir, std::string source = "mem://data")
      : dir_(std::move(dir)),
        source_(std::move(source)),
        log_(spdlog::null_logger_mt("test-cluster-" + std::to_string(++count_))),
        origin_(std::make_shared<MemOrigin>(source_)) {}

  ~TestCluster() {
    agents_.clear();
    service_.reset();
  }

  // Starts the coordinator (its data in DIR/coord); `tweak` may change its
  // options first (timeouts, checkpoint settings).
  Status Start(const std::function<void(Coordinator::Options*)>& tweak = nullptr) {
    Coordinator::Options options{.data_dir = JoinPath(dir_, "coord"), .logger = log_, .open_origin = opener()};
    if (drain_checkpoints_) {
      options.ckpt.origin = ckpt_origin_dir();
      options.ckpt.open_origin = [](const std::string& source) { return OpenCkptOrigin(source); };
    }
    if (tweak) tweak(&options);
    HOARD_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(std::move(options)));
    service_ = std::make_unique<CoordinatorService>(
        coordinator_.get(),
        CoordinatorService::Options{.endpoint = "tcp://127.0.0.1:0", .logger = log_, .context = &zmq_});
    return service_->Start();
  }

  // Starts (or restarts) a node agent with its store in DIR/NAME.
  Result<NodeAgent*> StartAgent(const std::string& name, uint64_t capacity = 0,
                                std::chrono::milliseconds warm_retry_after = std::chrono::seconds(30),
                                std::chrono::milliseconds heartbeat_interval = std::chrono::milliseconds(100)) {
    agents_.erase(name);
    HOARD_ASSIGN_OR_RETURN(std::unique_ptr<NodeAgent> a,
                           NodeAgent::Start({.name = name,
                                             .listen = "tcp://127.0.0.1:0",
                                             .coordinator = service_->endpoint(),
                                             .store_dir = JoinPath(dir_, name),
                                             .capacity_bytes = capacity,
                                             .fetch_threads = 2,
                                             .heartbeat_interval = heartbeat_interval,
                                             .warm_retry_after = warm_retry_after,
                                             .logger = log_,
                                             .context = &zmq_,
                                             .open_origin = opener(),
                                             .ckpt_origin = drain_checkpoints_ ? ckpt_origin_dir() : "",
                                             .open_ckpt_origin = drain_checkpoints_ ? OpenPosixCkptOrigin : nullptr,
                                             .ckpt_poll_interval = std::chrono::milliseconds(drain_checkpoints_ ? 100 : 500)}));
    NodeAgent* raw = a.get();
    agents_[name] = std::move(a);
    return raw;
  }
  // Stops the coordinator's service (its state stays on disk), as a crash
  // or an outage would look to nodes and mounts.
  void StopCoordinator() { service_.reset(); }

  // Stops and forgets an agent (its store stays on disk).
  void StopAgent(const std::string& name) { agents_.erase(name); }
  NodeAgent* agent(const std::string& name) { return agents_.at(name).get(); }

  Coordinator& coordinator() { return *coordinator_; }
  const std::string& endpoint() const { return service_->endpoint(); }
  MemOrigin& origin() { return *origin_; }
  const std::string& source() const { return source_; }
  OriginPool::Opener opener() const { return ForwardingOrigin::Opener(source_, origin_); }
  zmq::context_t& zmq() { return zmq_; }
  const std::shared_ptr<spdlog::logger>& logger() const { return log_; }
  const std::string& dir() const { return dir_; }
  // See the top; call before Start().
  void DrainCheckpoints() { drain_checkpoints_ = true; }
  std::string ckpt_origin_dir() const { return JoinPath(dir_, "ckpt-origin"); }

 private:
  static Result<std::unique_ptr<CkptOrigin>> OpenPosixCkptOrigin(const std::string& source) {
    return OpenCkptOrigin(source);
  }

  std::string dir_;
  std::string source_;
  std::shared_ptr<spdlog::logger> log_;
  zmq::context_t zmq_;
  std::shared_ptr<MemOrigin> origin_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::map<std::string, std::unique_ptr<NodeAgent>> agents_;
  bool drain_checkpoints_ = false;
  static inline int count_ = 0;
};

}  // namespace hoard::testing
