// File: consensus/etcd_kv.h
//
// EtcdKv: Kv (consensus/kv.h) on an etcd 3.4 cluster, through the JSON
// gateway every etcd member serves on its client URL (POST /v3/kv/range,
// /v3/kv/txn, /v3/lease/*, /v3/watch, /v3/maintenance/status), spoken over
// HTTP/1.1 with Boost.Beast. Why the gateway rather than gRPC:
// consensus/README.md. Keys and values travel base64-encoded, 64-bit
// integers as JSON strings; an absent field is 0, false or empty.
//
// Members and failover: a call goes to the member that answered last; a
// member that does not answer (connection refused, no connection within
// connect_timeout, no reply within request_timeout) is skipped for
// `skip_for`, and the call goes on to the next one. Every member is tried
// before a call gives up with kUnavailable (skipped ones last). Whether a
// call that was sent and got no reply is tried elsewhere depends on what it
// does:
//   - reads, keep-alives, revokes and waits are: doing them twice is
//     harmless;
//   - Txn and LeaseGrant are not: they may have been applied, so the call
//     returns kUnavailable and the caller, whose compares make a second try
//     safe, decides (a lease granted twice only costs a lease that expires).
// A member that answers with an error etcd gives while it has no leader
// (gRPC Unavailable) is skipped the same way.
//
// WaitEvents opens a watch stream per call (start_revision = after + 1),
// reads until the first batch of events or the timeout, and closes it. It
// asks for a member with a leader (gRPC metadata "hasleader" through the
// gateway), so a member cut off from the others refuses the watch, and the
// call goes on to the next member, instead of waiting in silence.
// Keeping one stream open across calls would save a connection and a watch
// creation per call, but hoard's standbys wait in a loop at a few calls per
// second, and a stream per call has no state to lose when a member fails: the
// next call simply starts again from the caller's revision on another member.
// On a timeout with no event it returns `after_revision` itself, not the
// store's revision: a watch that starts in the past catches up
// asynchronously, so a quiet stream does not prove that nothing happened up
// to the revision etcd reported when the watch was created.
//
// Errors from etcd map to kv.h's codes: "requested lease not found" ->
// kNotFound (a keep-alive of an unknown lease, which etcd answers with TTL 0,
// too), "required revision has been compacted" -> kStale, "request is too
// large" and other refusals of the request -> kInvalidArgument, no answer or
// no leader -> kUnavailable, anything else -> kInternal.
//
// Not supported: TLS (http:// endpoints only; https:// is refused by Open)
// and etcd's authentication.
//
// Connections: HTTP/1.1 keep-alive connections are pooled per member and
// reused across calls; a call takes one from the pool (or opens one), so
// concurrent calls use different connections. A watch uses a connection of
// its own and closes it.
//
// Thread-safety: thread-safe; calls may run concurrently and block for up to
// their timeouts (a call that tries every member: up to members x
// (connect_timeout + request_timeout)).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "consensus/kv.h"

namespace hoard {

class EtcdKv : public Kv {
 public:
  struct Options {
    // The members' client URLs, "http://HOST:PORT" (the scheme may be left
    // out). At least one.
    std::vector<std::string> endpoints;
    // From sending a request to its whole reply.
    std::chrono::milliseconds request_timeout{2000};
    // To open a TCP connection to a member.
    std::chrono::milliseconds connect_timeout{1000};
    // How long a member that did not answer is tried only after the others.
    std::chrono::milliseconds skip_for{5000};
    // Time for skip_for. Not owned.
    Clock* clock = Clock::Real();
  };

  // "http://a:1,http://b:2" -> {"http://a:1", "http://b:2"} (spaces
  // trimmed, empty items dropped).
  static std::vector<std::string> SplitEndpoints(const std::string& list);

  // kInvalidArgument for no endpoint, or one that is not http://HOST:PORT.
  // Connects to nothing yet.
  static Result<std::unique_ptr<EtcdKv>> Open(Options options);
  ~EtcdKv() override;

  Result<KvRange> Range(const std::string& key, const std::string& range_end = {}, int64_t limit = 0) override;
  Result<KvTxnResult> Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                          const std::vector<KvOp>& failure = {}) override;
  Result<int64_t> LeaseGrant(std::chrono::seconds ttl) override;
  Result<std::chrono::seconds> LeaseKeepAlive(int64_t lease) override;
  Status LeaseRevoke(int64_t lease) override;
  Result<KvEvents> WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                              std::chrono::milliseconds timeout) override;
  // One status request per endpoint (in turn), and the member list for
  // their names. Never fails: a member that does not answer is unhealthy,
  // with the reason in `error`.
  Result<std::vector<KvMember>> Members() override;

  // etcd's compaction (physical: returns once it is done): history below
  // `revision` is dropped. kStale if it already was, kInvalidArgument for a
  // future revision.
  Status Compact(int64_t revision);

 private:
  struct Endpoint;
  struct Conn;
  struct Exchange;
  enum class Retry { kIdempotent, kAtMostOnce };

  explicit EtcdKv(Options options, std::vector<Endpoint> endpoints);

  // POSTs `body` to `path` on one member after another (see the top of this
  // file); the reply's JSON text, or the error etcd or the network gave.
  Result<std::string> Call(const std::string& path, const std::string& body, Retry retry) EXCLUDES(mu_);
  // One request to member `m` on a pooled connection (a fresh one if a
  // reused one turns out closed by the member).
  Exchange Send(size_t m, const std::string& path, const std::string& body) EXCLUDES(mu_);
  // The members in the order a call tries them.
  std::vector<size_t> Order() EXCLUDES(mu_);
  void MarkAnswered(size_t m) EXCLUDES(mu_);
  void MarkFailed(size_t m) EXCLUDES(mu_);
  std::unique_ptr<Conn> TakeConn(size_t m) EXCLUDES(mu_);
  void ReturnConn(std::unique_ptr<Conn> conn) EXCLUDES(mu_);
  Status Connect(Conn* conn) const;
  // One watch stream on member `m`; `*answered` says whether the member
  // answered (so that a failure is the member's, worth trying the next one).
  Result<KvEvents> WatchOnce(size_t m, const std::string& body, int64_t after_revision,
                             std::chrono::steady_clock::time_point deadline, bool* answered);

  const Options options_;
  const std::vector<Endpoint> endpoints_;

  Mutex mu_;
  size_t preferred_ GUARDED_BY(mu_) = 0;  // the member that answered last
  std::vector<std::chrono::steady_clock::time_point> skip_until_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Conn>> idle_ GUARDED_BY(mu_);  // keep-alive connections, any member
};

}  // namespace hoard
