// File: coordinator/ha_coordinator.h
//
// HaCoordinator runs one of a set of coordinators in high availability
// (issue 32; docs/architecture.md, "Coordinators in high availability"): a
// standby until etcd elects it (consensus/leader_election.h), then the
// cluster's coordinator until its term ends, then a standby again. All of
// them serve on their own endpoint; clients hold the list and follow the
// leader (proto/leader_client.h).
//
//   standby  answers every request kNotLeader, naming the leader it last saw
//            (a CoordinatorService with no coordinator), and follows both
//            journals as the leader writes them (EtcdJournal::Follow), so a
//            takeover reads only what the last moments added;
//   leader   opens a Coordinator whose two stores write those journals,
//            fenced with its term, and serves it on the same endpoint until
//            the term ends: the lease is lost (a pause, etcd out of reach),
//            Stop() resigns, or a write is fenced out or left in doubt
//            (EtcdJournal::Options::on_lost). The coordinator is
//            then stopped and dropped whole, and the next term loads from
//            etcd again: nothing a former leader held in memory is used.
//
// Bulk data: manifests do not go into etcd (a large dataset's is hundreds of
// MB); the leader writes each to the shared store every coordinator reads
// (Coordinator::Options::shared_store) before the state naming it, and a new
// leader fetches the ones it lacks from there, checked against the checksum
// the state holds.
//
// Thread-safety: Start/Stop from one thread; the term loop runs on its own
// thread, the follower on another while standing by.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "consensus/etcd_journal.h"
#include "consensus/kv.h"
#include "consensus/leader_election.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"

namespace hoard {

class HaCoordinator {
 public:
  struct Options {
    // Everything a coordinator takes; data_dir is this process's own
    // (manifests it fetched, metrics address), not the cluster's state.
    Coordinator::Options coordinator;
    std::string listen;     // where to serve, e.g. tcp://0.0.0.0:7100
    std::string advertise;  // what clients are told to dial, e.g. tcp://host1:7100
    // Keys in etcd: PREFIX leader, PREFIX state/..., PREFIX ckpt/...
    std::string prefix = "/hoard/default/";
    std::chrono::seconds lease_ttl{3};
    Kv* kv = nullptr;  // required; outlives this
    zmq::context_t* context = nullptr;
    std::shared_ptr<spdlog::logger> logger;
    Clock* clock = Clock::Real();
  };

  explicit HaCoordinator(Options options);
  ~HaCoordinator();  // Stop()

  // Starts serving (as a standby) and campaigning. An endpoint that cannot
  // be bound is an error here.
  Status Start();
  // Resigns if leading (a standby takes over at once), stops serving.
  void Stop();

  bool leading() const;
  std::string leader() const { return election_.leader(); }
  const std::string& advertise() const { return options_.advertise; }
  // hoard_coordinator_leader, _terms_total, _takeover_seconds and the
  // current term's coordinator metrics.
  void RegisterMetrics(metrics::Registry* registry);
  // The coordinator of the current term (null while standing by); for tests.
  std::shared_ptr<Coordinator> TEST_current() const;

 private:
  void TermLoop();
  // One term: open the coordinator on the followed journals, serve it until
  // the term ends. Returns when it has ended and everything is stopped.
  void Lead(const Fence& fence);
  // Follows both journals until `following_` turns false.
  void Follow();
  // ClusterStatusReply::ha while leading term `term`: asks etcd for its
  // members' health (each member's status, a moment per member).
  proto::HaStatus Describe(int64_t term) const;
  std::shared_ptr<EtcdJournal> NewJournal(const std::string& what);
  Status StartStandbyService();

  Options options_;
  LeaderElection election_;
  std::thread loop_;
  std::atomic<bool> stopping_{false};

  // The journals a standby follows and the next term opens.
  std::shared_ptr<EtcdJournal> state_journal_;
  std::shared_ptr<EtcdJournal> ckpt_journal_;
  std::thread follower_;
  std::atomic<bool> following_{false};

  std::unique_ptr<CoordinatorService> standby_service_;  // loop thread only
  mutable Mutex mu_;
  std::shared_ptr<Coordinator> current_ GUARDED_BY(mu_);
  std::unique_ptr<metrics::Registry> term_metrics_ GUARDED_BY(mu_);
  double last_takeover_seconds_ GUARDED_BY(mu_) = 0;
};

}  // namespace hoard
