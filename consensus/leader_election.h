// File: consensus/leader_election.h
//
// LeaderElection makes one of several candidates the leader, through a key in
// etcd bound to a lease (consensus/kv.h): whoever creates the key leads while
// it keeps the lease alive; the others watch the key and try again when it is
// deleted (the leader resigned, or its lease expired because it died, hung or
// lost etcd). Coordinators in high availability run one each
// (coordinator/ha_coordinator.h).
//
// The fence: the key's create_revision identifies one term of one leader, for
// ever (etcd never reuses a revision). Every state change the leader makes
// goes through a transaction that also compares the key's create_revision with
// its term's (Fence::Compare, used by EtcdJournal), so a leader whose lease
// has expired cannot change anything, even before it notices: as 3FS re-checks
// its manager lease inside every FoundationDB write.
//
// Knowing when to stop: the leader renews its lease every ttl/3. It counts a
// renewal from the moment it *sent* the request, so its own idea of when the
// lease ends (`Leading()` false, Lost() wakes) comes before etcd's: a leader
// stops serving no later than etcd lets another one start, and the fence
// covers a leader too slow even to look at its clock (a SIGSTOP). A renewal
// that fails is retried until that moment; kNotFound (etcd says the lease is
// gone) ends the term at once.
//
// Thread-safety: all methods are thread-safe. Campaign blocks its caller; one
// background thread renews the lease while leading.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/result.h"
#include "consensus/kv.h"

namespace hoard {

// One leader's term: the election key and the revision that created it.
struct Fence {
  std::string key;
  int64_t create_revision = 0;
  // Holds only while this term lasts.
  KvCompare Compare() const { return KvCompare::CreateRevision(key, KvCompare::Op::kEqual, create_revision); }
};

class LeaderElection {
 public:
  struct Options {
    std::string key;    // e.g. "/hoard/CLUSTER/leader"
    std::string value;  // what followers are told: this candidate's endpoint
    std::chrono::seconds ttl{3};
    // How long one wait for the key's deletion lasts before looking again
    // (a lost watch, a Stop).
    std::chrono::milliseconds poll{1000};
    Clock* clock = Clock::Real();
    std::shared_ptr<spdlog::logger> logger;  // required
  };

  LeaderElection(Kv* kv, Options options);
  ~LeaderElection();  // Stop()

  // Blocks until this candidate leads (returns its term's fence) or Stop()
  // (kUnavailable). etcd being unreachable is retried, not returned.
  Result<Fence> Campaign();

  // True while this candidate leads, by its own clock (see the top).
  bool Leading() const;
  // Blocks until the current term ends (lease lost or expired, Resign, Stop)
  // and returns why; at once if not leading.
  Status WaitLost();
  // Ends the term now: stops renewing and revokes the lease (deleting the key),
  // so a standby takes over without waiting out the TTL.
  void Resign();
  // Ends every wait: Campaign returns kUnavailable, WaitLost returns. Resigns
  // if leading.
  void Stop();

  // The leader's value as last seen (this candidate's own when it leads; empty
  // while none is known): what a standby names in its kNotLeader answers.
  std::string leader() const;
  // Terms this candidate has won (a metric).
  uint64_t terms() const;

 private:
  // Renews `lease` every ttl/3 while its term lasts; ends the term when it
  // cannot. Revokes the lease when the term ends by itself.
  void RenewLoop(int64_t lease, std::chrono::steady_clock::time_point first_renewal);
  void EndTermLocked(Status why) REQUIRES(mu_);

  Kv* kv_;
  Options options_;
  mutable Mutex mu_;
  CondVar changed_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool leading_ GUARDED_BY(mu_) = false;
  int64_t lease_ GUARDED_BY(mu_) = 0;
  // Leading() turns false here, before etcd would expire the lease.
  std::chrono::steady_clock::time_point deadline_ GUARDED_BY(mu_);
  Status lost_why_ GUARDED_BY(mu_);
  std::string leader_ GUARDED_BY(mu_);
  uint64_t terms_ GUARDED_BY(mu_) = 0;
  Mutex thread_mu_;  // never held with mu_ while joining
  std::thread renewer_ GUARDED_BY(thread_mu_);  // joined by Campaign (next term), Resign and Stop
};

}  // namespace hoard
