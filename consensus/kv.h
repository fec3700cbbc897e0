// File: consensus/kv.h
//
// Kv is the small slice of etcd's v3 API that hoard's coordinators need to
// run in high availability (docs/architecture.md, "Coordinators in high
// availability"): ranges, transactions with compares (the fence every state
// change goes through), leases (leadership that ends by itself when its
// holder stops renewing it) and waiting for changes (how standbys follow the
// leader). Two implementations: EtcdKv (consensus/etcd_kv.h) speaks etcd 3.4's
// JSON gateway to a list of members; MemKv (consensus/mem_kv.h) is the
// in-memory twin with etcd's semantics and injectable faults, for unit tests.
//
// Semantics are etcd's, so code tested against MemKv behaves the same on
// etcd:
//   - one revision counter for the whole store, bumped once by every
//     transaction or put/delete that changes something; a key's
//     create_revision is the revision that created it (0: it does not exist),
//     mod_revision the one that last changed it, version the number of
//     changes since its creation (0: it does not exist);
//   - a transaction evaluates all its compares against one revision and
//     applies either all of `success` or all of `failure`, atomically;
//   - a key put with a lease is deleted when the lease expires or is revoked;
//     a lease expires when not kept alive for its TTL;
//   - WaitEvents returns every change to a key range after a revision, in
//     revision order, or kStale when that history was compacted away.
//
// Errors: kUnavailable when no member answered in time (retry later: the
// operation may or may not have been applied, so callers make their writes
// idempotent through compares); kNotFound for a lease that expired or was
// revoked; kStale for a revision that was compacted; kInvalidArgument for a
// request etcd refuses as malformed or too large (etcd's default limits are
// 1.5 MiB per request, hence kMaxRequestBytes, and 128 operations per branch
// of a transaction).
//
// Thread-safety: implementations are thread-safe; calls may block for up to
// their timeout (EtcdKv) and may run concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace hoard {

// What hoard keeps under one request: etcd refuses larger ones by default
// (--max-request-bytes 1.5 MiB); the margin is for the request's framing.
inline constexpr size_t kMaxRequestBytes = 1u << 20;

struct KvPair {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;  // 0: none
};

struct KvCompare {
  enum class Target { kCreateRevision, kModRevision, kVersion, kValue };
  enum class Op { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kVersion;
  Op op = Op::kEqual;
  int64_t number = 0;  // for the three revision/version targets
  std::string value;   // for kValue

  static KvCompare CreateRevision(std::string key, Op op, int64_t rev) {
    return {std::move(key), Target::kCreateRevision, op, rev, {}};
  }
  static KvCompare ModRevision(std::string key, Op op, int64_t rev) {
    return {std::move(key), Target::kModRevision, op, rev, {}};
  }
  static KvCompare Version(std::string key, Op op, int64_t version) {
    return {std::move(key), Target::kVersion, op, version, {}};
  }
  static KvCompare Value(std::string key, Op op, std::string value) {
    return {std::move(key), Target::kValue, op, 0, std::move(value)};
  }
  // The key does not exist.
  static KvCompare Absent(std::string key) { return Version(std::move(key), Op::kEqual, 0); }
};

// One operation of a transaction. A range `[key, range_end)`; an empty
// range_end means the one key `key` (etcd's convention).
struct KvOp {
  enum class Kind { kPut, kDelete, kRange };
  Kind kind = Kind::kRange;
  std::string key;
  std::string range_end;
  std::string value;  // kPut
  int64_t lease = 0;  // kPut: 0 = none
  int64_t limit = 0;  // kRange: 0 = no limit

  static KvOp Put(std::string key, std::string value, int64_t lease = 0) {
    return {Kind::kPut, std::move(key), {}, std::move(value), lease, 0};
  }
  static KvOp Delete(std::string key, std::string range_end = {}) {
    return {Kind::kDelete, std::move(key), std::move(range_end), {}, 0, 0};
  }
  static KvOp Get(std::string key, std::string range_end = {}, int64_t limit = 0) {
    return {Kind::kRange, std::move(key), std::move(range_end), {}, 0, limit};
  }
};

// The end of the range of every key starting with `prefix` (etcd's
// "prefix + 1": the prefix with its last byte incremented, dropping trailing
// 0xff bytes). PrefixEnd("") is "\0": every key.
std::string PrefixEnd(const std::string& prefix);

struct KvRange {
  std::vector<KvPair> kvs;  // in key order
  bool more = false;        // a limit cut the answer
  int64_t revision = 0;     // the store's revision the answer is from
};

struct KvTxnResult {
  bool succeeded = false;  // the compares held: `success` was applied
  int64_t revision = 0;    // the store's revision after the transaction
  // One entry per kRange op of the branch that ran, in order.
  std::vector<std::vector<KvPair>> ranges;
};

struct KvEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KvPair kv;  // for kDelete: key and mod_revision (the deleting revision)
};

struct KvEvents {
  std::vector<KvEvent> events;  // in revision order
  // Ask again after this revision: the last event's revision, or, when the
  // wait timed out with no event, a revision at or after the one asked from
  // up to which nothing in the range changed (etcd cannot promise its
  // current one: a watch from the past catches up in the background).
  int64_t revision = 0;
};

struct KvMember {
  std::string name;
  std::string endpoint;  // the client URL hoard uses for it
  bool healthy = false;  // answered a status request
  bool leader = false;   // etcd's raft leader
  int64_t db_size_bytes = 0;
  std::string error;  // why not healthy
};

class Kv {
 public:
  virtual ~Kv() = default;

  virtual Result<KvRange> Range(const std::string& key, const std::string& range_end = {}, int64_t limit = 0) = 0;
  virtual Result<KvTxnResult> Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                                  const std::vector<KvOp>& failure = {}) = 0;

  // A new lease of `ttl`; its id.
  virtual Result<int64_t> LeaseGrant(std::chrono::seconds ttl) = 0;
  // Renews the lease for its whole TTL; returns the TTL it now has.
  // kNotFound once it expired or was revoked.
  virtual Result<std::chrono::seconds> LeaseKeepAlive(int64_t lease) = 0;
  // Ends the lease and deletes its keys. OK if it was already gone.
  virtual Status LeaseRevoke(int64_t lease) = 0;

  // The changes to [key, range_end) at revisions above `after_revision`:
  // returns as soon as there is at least one, or with none after `timeout`.
  // kStale if revisions after `after_revision` were compacted.
  virtual Result<KvEvents> WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                                      std::chrono::milliseconds timeout) = 0;

  // Every member of the cluster and whether it answers (for `hoard status`).
  virtual Result<std::vector<KvMember>> Members() = 0;
};

}  // namespace hoard
