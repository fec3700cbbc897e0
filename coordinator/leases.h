// File: coordinator/leases.h
//
// LeaseTable is the coordinator's list of job leases: a job (a Slurm job, a
// Kubernetes pod, a `hoard-run-when-cached` run) holds a lease on each
// dataset it reads, from its prolog to its epilog, and a dataset with an
// unexpired lease is never evicted (the eviction planner asks HeldDatasets).
//
// A lease is keyed by (dataset, job). Take sets its expiry to now + ttl:
// the same call takes a new lease or renews one (idempotent, so a client may
// resend it across a coordinator takeover), keeping when it was first taken.
// Release drops one lease, or every lease of a job; releasing what is not
// held is success (an epilog after the lease expired, a resend). A lease
// nobody renews ends at its expiry, by the coordinator's clock (wall seconds:
// leases survive restarts and takeovers, so a monotonic clock would not do):
// HeldDatasets and List never count an expired lease, and Expire drops them
// for good (the coordinator's liveness round, which journals the removal).
//
// Durability: the coordinator journals the table with its other state
// (CoordinatorState::leases, coordinator/state_store.h), so leases survive a
// restart and, under HA, a takeover; Load puts them back.
//
// Bounds: at most `max_per_dataset` leases on one dataset and `max_total`
// in all (a runaway job script must not grow the journal without end);
// beyond them Take fails kNoSpace (the table is full), saying which bound.
//
// Invariants: every lease's dataset and job are non-empty; expires_unix >
// renewed_unix >= taken_unix.
//
// Thread-safety: none; the coordinator calls it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "proto/messages.h"

namespace hoard {

class LeaseTable {
 public:
  struct Options {
    uint32_t default_ttl_s = 24 * 3600;     // a Take with ttl 0
    uint32_t max_ttl_s = 30 * 24 * 3600;    // longer is refused: renew instead
    size_t max_per_dataset = 1000;
    size_t max_total = 10000;
  };

  LeaseTable() : LeaseTable(Options()) {}
  explicit LeaseTable(Options options) : options_(options) {}

  // Takes or renews `job`'s lease on `dataset` until now + ttl_s (0: the
  // default). The caller checked that the dataset exists. kInvalidArgument
  // for an empty or overlong job id or a ttl over the maximum;
  // kNoSpace (the table is full) past a bound.
  Result<proto::Lease> Take(const std::string& dataset, const std::string& job, uint32_t ttl_s,
                            const std::string& key_class, const proto::Caller& holder, int64_t now_unix);
  // Drops the job's lease on `dataset` (empty: all of the job's); returns the
  // leases dropped (maybe none).
  std::vector<proto::Lease> Release(const std::string& dataset, const std::string& job);
  // Drops every lease on `dataset` (the dataset is gone).
  std::vector<proto::Lease> ReleaseDataset(const std::string& dataset);
  // Drops the leases expired at `now_unix` and returns them.
  std::vector<proto::Lease> Expire(int64_t now_unix);

  // The leases unexpired at `now_unix`, by dataset then job.
  std::vector<proto::Lease> List(int64_t now_unix) const;
  // The datasets with at least one lease unexpired at `now_unix`: what the
  // eviction planner must not evict.
  std::set<std::string> HeldDatasets(int64_t now_unix) const;

  // Every lease, expired or not: what the coordinator journals.
  std::vector<proto::Lease> All() const;
  // Replaces the table with `leases` (the journaled state, at start).
  void Load(const std::vector<proto::Lease>& leases);
  // Puts a lease back as it was (undoing a Take or Release whose journal
  // write failed).
  void Restore(const proto::Lease& lease) { leases_[{lease.dataset, lease.job}] = lease; }
  void Erase(const std::string& dataset, const std::string& job) { leases_.erase({dataset, job}); }
  // A lease by key, or null.
  const proto::Lease* Find(const std::string& dataset, const std::string& job) const;
  size_t size() const { return leases_.size(); }

  // The longest job id accepted.
  static constexpr size_t kMaxJobLength = 256;

 private:
  Options options_;
  std::map<std::pair<std::string, std::string>, proto::Lease> leases_;  // by (dataset, job)
};

}  // namespace hoard
