// File: consensus/mem_kv.h
//
// MemKv: the in-memory twin of EtcdKv (consensus/kv.h), with etcd 3.4's
// semantics, for the unit tests of what is built on Kv (leadership, the
// fenced journal). The conformance suite (consensus/kv_test.cc) runs the same
// tests against MemKv and a real etcd, so code tested here behaves alike on
// etcd:
//   - one revision counter, starting at 1 like a fresh etcd; a Txn that
//     changes something bumps it once, whatever it changes; one that changes
//     nothing (compares failed into an empty branch, a delete of no key, a
//     read-only branch) leaves it;
//   - a Txn evaluates every compare on the same state, then runs one branch
//     in order (a range after a put in the branch sees the put); a value
//     compare on a missing key is false, as in etcd; a branch that puts one
//     key twice or deletes a key it puts is kInvalidArgument, and a put with
//     an unknown lease kNotFound, both before anything is applied;
//   - a request larger than etcd's default limit (1.5 MiB of keys and values)
//     is kInvalidArgument, as etcd's "request is too large", and so is a Txn
//     with more than 128 compares or operations in a branch (etcd's default
//     --max-txn-ops);
//   - leases expire on the injected Clock: a lease granted or kept alive at T
//     with TTL t is gone from T + t on, and its keys are deleted in one
//     revision (as etcd revokes a lease). There is no background thread:
//     expiry is evaluated whenever a call reads the time, and WaitEvents
//     wakes for the next expiry, so with a FakeClock a lease ends exactly
//     when the test advances time past it;
//   - history: WaitEvents reads the changes kept since the last compaction;
//     Compact(rev) drops those below rev (a wait after a revision before
//     rev - 1 is then kStale, as etcd's watch), and Options::keep_revisions
//     compacts automatically, as etcd's auto-compaction.
//
// Faults, for the tests of Kv's users:
//   - FailNext(n, status): the next n calls (except Members) fail with
//     `status` and apply nothing;
//   - SetUnavailable(true): every call fails kUnavailable until false (a
//     partition); a WaitEvents in progress returns kUnavailable too;
//   - LoseNextTxnReplies(n): the next n Txns are applied and then answered
//     kUnavailable, as when etcd applied a request whose reply was lost: how a
//     caller learns that a retried write must be idempotent;
//   - SetBeforeCallHook(fn): fn(call name) runs at the start of every call,
//     without MemKv's lock, so a test can stop a caller at an exact point
//     (a leader about to write) and move the clock meanwhile.
// Members() never fails: it reports the one member, unhealthy while
// unavailable.
//
// Thread-safety: thread-safe; one Mutex guards the whole store. WaitEvents
// waits on a CondVar through the Clock (Clock::WaitUntil), woken by every
// change.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "consensus/kv.h"

namespace hoard {

class MemKv : public Kv {
 public:
  struct Options {
    // Time for leases and waits. Not owned; must outlive the MemKv.
    Clock* clock = Clock::Real();
    // Revisions of history kept for WaitEvents: once the store is more than
    // this many revisions ahead of the last compaction, the older ones are
    // compacted (a waiter that far behind gets kStale and must read the
    // state again). 0 keeps everything until Compact.
    int64_t keep_revisions = 10000;
  };

  MemKv() : MemKv(Options{}) {}
  explicit MemKv(Options options);

  Result<KvRange> Range(const std::string& key, const std::string& range_end = {}, int64_t limit = 0) override;
  Result<KvTxnResult> Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                          const std::vector<KvOp>& failure = {}) override;
  Result<int64_t> LeaseGrant(std::chrono::seconds ttl) override;
  Result<std::chrono::seconds> LeaseKeepAlive(int64_t lease) override;
  Status LeaseRevoke(int64_t lease) override;
  Result<KvEvents> WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                              std::chrono::milliseconds timeout) override;
  Result<std::vector<KvMember>> Members() override;

  // etcd's compaction: the history below `revision` is dropped. kStale if
  // `revision` is at or below the last compaction, kInvalidArgument if it is
  // above the store's revision (etcd's two refusals).
  Status Compact(int64_t revision) EXCLUDES(mu_);
  // The store's revision.
  int64_t revision() const EXCLUDES(mu_);

  // Faults (see the top of this file).
  void FailNext(int n, Status status) EXCLUDES(mu_);
  void SetUnavailable(bool unavailable) EXCLUDES(mu_);
  void LoseNextTxnReplies(int n) EXCLUDES(mu_);
  void SetBeforeCallHook(std::function<void(std::string_view call)> hook) EXCLUDES(mu_);

 private:
  struct Value {
    std::string value;
    int64_t create_revision = 0;
    int64_t mod_revision = 0;
    int64_t version = 0;
    int64_t lease = 0;
  };
  struct Lease {
    std::chrono::seconds ttl{0};
    std::chrono::steady_clock::time_point expiry;
    std::set<std::string> keys;
  };

  // Runs the hook, then takes the lock: the hook must not hold it.
  void BeforeCall(std::string_view call) EXCLUDES(mu_);
  // The injected fault for this call, if any (consumes one FailNext).
  Status Fault() REQUIRES(mu_);
  // Revokes every lease whose time is up, one revision each.
  void ExpireLeases() REQUIRES(mu_);
  // Deletes the lease and its keys (one revision if it had any).
  void RevokeLocked(int64_t lease) REQUIRES(mu_);

  std::vector<KvPair> RangeLocked(const std::string& key, const std::string& range_end, int64_t limit,
                                  bool* more) const REQUIRES(mu_);
  bool CompareHolds(const KvCompare& c) const REQUIRES(mu_);
  // kNotFound if a put of the branch that runs names an unknown lease.
  Status CheckLeases(const std::vector<KvOp>& ops) const REQUIRES(mu_);
  // Applies one put or delete at revision_ + 1 (the caller bumps revision_
  // once if anything changed); returns whether it changed something.
  bool PutLocked(const std::string& key, const std::string& value, int64_t lease) REQUIRES(mu_);
  bool DeleteLocked(const std::string& key, const std::string& range_end) REQUIRES(mu_);
  // Ends a write: bumps the revision, trims history, wakes waiters.
  void Commit() REQUIRES(mu_);

  const Options options_;
  Clock* const clock_;

  mutable Mutex mu_;
  CondVar changed_;  // notified on every new revision
  std::map<std::string, Value> keys_ GUARDED_BY(mu_);
  int64_t revision_ GUARDED_BY(mu_) = 1;
  // The changes of revisions >= compacted_, in revision order.
  std::deque<KvEvent> history_ GUARDED_BY(mu_);
  int64_t compacted_ GUARDED_BY(mu_) = 0;
  std::map<int64_t, Lease> leases_ GUARDED_BY(mu_);
  // Lease ids are large, as etcd's are, so that a caller that squeezes one
  // into 32 bits or a double fails here too.
  int64_t next_lease_ GUARDED_BY(mu_) = 0x694d'7a00'0000'0001;

  int fail_next_ GUARDED_BY(mu_) = 0;
  Status fail_status_ GUARDED_BY(mu_);
  bool unavailable_ GUARDED_BY(mu_) = false;
  int lose_txn_replies_ GUARDED_BY(mu_) = 0;
  std::function<void(std::string_view)> before_call_ GUARDED_BY(mu_);
};

}  // namespace hoard
