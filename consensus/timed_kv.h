// File: consensus/timed_kv.h
//
// TimedKv passes every call through to another Kv and times it, so that an
// operator sees what etcd costs the coordinators (issue 32: "metrics for
// etcd latency"): one histogram per kind of call and a count of the calls
// that failed, exported as
//
//   hoard_etcd_request_seconds{op="txn|range|lease|watch|members"}
//   hoard_etcd_request_errors_total{op=...}
//
// A watch (WaitEvents) waits for changes by design: its time says how long
// nothing happened, not how slow etcd is; it is kept apart for that reason.
//
//   EtcdKv etcd = ...;
//   TimedKv kv(etcd.get());
//   kv.RegisterMetrics(&registry);
//   HaCoordinator ha({..., .kv = &kv});
//
// Thread-safety: as the Kv it wraps; the metrics are atomics.
#pragma once

#include <array>
#include <chrono>

#include "common/metrics.h"
#include "consensus/kv.h"

namespace hoard {

class TimedKv : public Kv {
 private:
  enum Op { kTxn, kRange, kLease, kWatch, kMembers, kOps };
  static constexpr std::array<const char*, kOps> kNames = {"txn", "range", "lease", "watch", "members"};

  // Defined before the calls that use it (its return type is deduced).
  template <typename Fn>
  auto Timed(Op op, Fn fn) {
    const auto start = std::chrono::steady_clock::now();
    auto r = fn();
    seconds_[op].Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!r.ok()) errors_[op].Add();
    return r;
  }

 public:
  explicit TimedKv(Kv* base) : base_(base) {}

  void RegisterMetrics(metrics::Registry* registry) const;

  Result<KvRange> Range(const std::string& key, const std::string& range_end, int64_t limit) override {
    return Timed(kRange, [&] { return base_->Range(key, range_end, limit); });
  }
  Result<KvTxnResult> Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                          const std::vector<KvOp>& failure) override {
    return Timed(kTxn, [&] { return base_->Txn(compare, success, failure); });
  }
  Result<int64_t> LeaseGrant(std::chrono::seconds ttl) override {
    return Timed(kLease, [&] { return base_->LeaseGrant(ttl); });
  }
  Result<std::chrono::seconds> LeaseKeepAlive(int64_t lease) override {
    return Timed(kLease, [&] { return base_->LeaseKeepAlive(lease); });
  }
  Status LeaseRevoke(int64_t lease) override {
    return Timed(kLease, [&] { return base_->LeaseRevoke(lease); });
  }
  Result<KvEvents> WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                              std::chrono::milliseconds timeout) override {
    return Timed(kWatch, [&] { return base_->WaitEvents(key, range_end, after_revision, timeout); });
  }
  Result<std::vector<KvMember>> Members() override {
    return Timed(kMembers, [&] { return base_->Members(); });
  }

  // For tests: the calls of kind `op` ("txn", ...) timed so far.
  uint64_t calls(const char* op) const;

 private:
  Kv* base_;
  std::array<metrics::Histogram, kOps> seconds_ = {
      metrics::Histogram(metrics::Histogram::LatencyBuckets()), metrics::Histogram(metrics::Histogram::LatencyBuckets()),
      metrics::Histogram(metrics::Histogram::LatencyBuckets()), metrics::Histogram(metrics::Histogram::LatencyBuckets()),
      metrics::Histogram(metrics::Histogram::LatencyBuckets())};
  std::array<metrics::Counter, kOps> errors_;
};

}  // namespace hoard
