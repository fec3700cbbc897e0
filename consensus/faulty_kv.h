// File: consensus/faulty_kv.h
//
// FaultyKv is one client's view of a shared Kv (usually a MemKv) with that
// client's own faults, for tests of what uses etcd: several coordinators share
// one MemKv, and the test cuts one of them off (a partition, a paused
// process) or loses the answer to a write that was applied (the case that
// makes callers write idempotently), while the others go on.
//
// Thread-safety: thread-safe; the switches are atomics.
#pragma once

#include <atomic>

#include "consensus/kv.h"

namespace hoard {

class FaultyKv : public Kv {
 public:
  explicit FaultyKv(Kv* base) : base_(base) {}

  // Every call fails with kUnavailable and reaches nothing (a cut link).
  void set_cut(bool cut) { cut_ = cut; }
  // The next `n` transactions are applied, but their answer is lost: the
  // caller gets kUnavailable.
  void LoseAnswers(int n) { lose_answers_ = n; }
  // Calls that reached the base Kv.
  int calls() const { return calls_; }

  Result<KvRange> Range(const std::string& key, const std::string& range_end, int64_t limit) override {
    if (Status s = Gate(); !s.ok()) return s;
    return base_->Range(key, range_end, limit);
  }
  Result<KvTxnResult> Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                          const std::vector<KvOp>& failure) override {
    if (Status s = Gate(); !s.ok()) return s;
    Result<KvTxnResult> r = base_->Txn(compare, success, failure);
    if (lose_answers_.load() > 0 && lose_answers_.fetch_sub(1) > 0) {
      return Status::Unavailable("the answer was lost (FaultyKv)");
    }
    return r;
  }
  Result<int64_t> LeaseGrant(std::chrono::seconds ttl) override {
    if (Status s = Gate(); !s.ok()) return s;
    return base_->LeaseGrant(ttl);
  }
  Result<std::chrono::seconds> LeaseKeepAlive(int64_t lease) override {
    if (Status s = Gate(); !s.ok()) return s;
    return base_->LeaseKeepAlive(lease);
  }
  Status LeaseRevoke(int64_t lease) override {
    if (Status s = Gate(); !s.ok()) return s;
    return base_->LeaseRevoke(lease);
  }
  Result<KvEvents> WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                              std::chrono::milliseconds timeout) override {
    if (Status s = Gate(); !s.ok()) return s;
    return base_->WaitEvents(key, range_end, after_revision, timeout);
  }
  Result<std::vector<KvMember>> Members() override {
    if (Status s = Gate(); !s.ok()) return s;
    return base_->Members();
  }

 private:
  Status Gate() {
    if (cut_) return Status::Unavailable("cut off from etcd (FaultyKv)");
    ++calls_;
    return Status::Ok();
  }

  Kv* base_;
  std::atomic<bool> cut_{false};
  std::atomic<int> lose_answers_{0};
  std::atomic<int> calls_{0};
};

}  // namespace hoard
