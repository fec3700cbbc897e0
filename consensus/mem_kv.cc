#include "consensus/mem_kv.h"

#include <algorithm>
#include <utility>

namespace hoard {
namespace {

// etcd's defaults: --max-request-bytes, --max-txn-ops.
constexpr size_t kEtcdMaxRequestBytes = 3u << 19;  // 1.5 MiB
constexpr size_t kEtcdMaxTxnOps = 128;

// etcd's conventions for [key, range_end): empty is the one key, "\0" is
// every key from `key` on.
bool InRange(const std::string& k, const std::string& key, const std::string& range_end) {
  if (range_end.empty()) return k == key;
  if (range_end == std::string(1, '\0')) return k >= key;
  return k >= key && k < range_end;
}

template <typename T>
bool Holds(KvCompare::Op op, const T& have, const T& want) {
  switch (op) {
    case KvCompare::Op::kEqual: return have == want;
    case KvCompare::Op::kNotEqual: return have != want;
    case KvCompare::Op::kLess: return have < want;
    case KvCompare::Op::kGreater: return have > want;
  }
  return false;
}

size_t RequestBytes(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                    const std::vector<KvOp>& failure) {
  size_t n = 0;
  for (const auto& c : compare) n += c.key.size() + c.value.size();
  for (const auto* ops : {&success, &failure}) {
    for (const auto& op : *ops) n += op.key.size() + op.range_end.size() + op.value.size();
  }
  return n;
}

}  // namespace

MemKv::MemKv(Options options) : options_(options), clock_(options.clock) {}

void MemKv::BeforeCall(std::string_view call) {
  std::function<void(std::string_view)> hook;
  {
    MutexLock l(&mu_);
    hook = before_call_;
  }
  if (hook) hook(call);
}

Status MemKv::Fault() {
  if (unavailable_) return Status::Unavailable("MemKv: unavailable (partitioned by the test)");
  if (fail_next_ > 0) {
    --fail_next_;
    return fail_status_;
  }
  return Status::Ok();
}

void MemKv::ExpireLeases() {
  const auto now = clock_->Now();
  std::vector<int64_t> expired;
  for (const auto& [id, lease] : leases_) {
    if (lease.expiry <= now) expired.push_back(id);
  }
  // One revision per lease, in id order: etcd's lessor revokes each expired
  // lease in a request of its own.
  for (int64_t id : expired) RevokeLocked(id);
}

void MemKv::RevokeLocked(int64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  const std::set<std::string> keys = std::move(it->second.keys);
  leases_.erase(it);
  bool changed = false;
  for (const auto& key : keys) changed |= DeleteLocked(key, {});
  if (changed) Commit();
}

std::vector<KvPair> MemKv::RangeLocked(const std::string& key, const std::string& range_end, int64_t limit,
                                       bool* more) const {
  std::vector<KvPair> out;
  *more = false;
  auto it = keys_.lower_bound(key);
  for (; it != keys_.end() && InRange(it->first, key, range_end); ++it) {
    if (limit > 0 && static_cast<int64_t>(out.size()) == limit) {
      *more = true;
      break;
    }
    const Value& v = it->second;
    out.push_back({it->first, v.value, v.create_revision, v.mod_revision, v.version, v.lease});
    if (range_end.empty()) break;
  }
  return out;
}

bool MemKv::CompareHolds(const KvCompare& c) const {
  auto it = keys_.find(c.key);
  if (it == keys_.end()) {
    // etcd: "always fail if comparing a value on a key that doesn't exist"
    // (an empty value and no value look alike on its wire); the numbers of a
    // missing key are all 0.
    if (c.target == KvCompare::Target::kValue) return false;
    return Holds<int64_t>(c.op, 0, c.number);
  }
  const Value& v = it->second;
  switch (c.target) {
    case KvCompare::Target::kCreateRevision: return Holds(c.op, v.create_revision, c.number);
    case KvCompare::Target::kModRevision: return Holds(c.op, v.mod_revision, c.number);
    case KvCompare::Target::kVersion: return Holds(c.op, v.version, c.number);
    case KvCompare::Target::kValue: return Holds(c.op, v.value, c.value);
  }
  return false;
}

// etcd refuses a branch that puts a key twice or deletes a key it puts,
// whichever branch runs.
static Status CheckShape(const std::vector<KvOp>& ops) {
  std::set<std::string> puts;
  for (const auto& op : ops) {
    if (op.kind == KvOp::Kind::kPut && !puts.insert(op.key).second) {
      return Status::InvalidArgument("etcdserver: duplicate key given in txn request");
    }
  }
  for (const auto& op : ops) {
    if (op.kind != KvOp::Kind::kDelete) continue;
    for (const auto& key : puts) {
      if (InRange(key, op.key, op.range_end)) {
        return Status::InvalidArgument("etcdserver: duplicate key given in txn request");
      }
    }
  }
  return Status::Ok();
}

Status MemKv::CheckLeases(const std::vector<KvOp>& ops) const {
  for (const auto& op : ops) {
    if (op.kind == KvOp::Kind::kPut && op.lease != 0 && !leases_.contains(op.lease)) {
      return Status::NotFound("etcdserver: requested lease not found");
    }
  }
  return Status::Ok();
}

bool MemKv::PutLocked(const std::string& key, const std::string& value, int64_t lease) {
  const int64_t rev = revision_ + 1;
  Value& v = keys_[key];
  if (v.lease != 0 && v.lease != lease) {
    auto old = leases_.find(v.lease);
    if (old != leases_.end()) old->second.keys.erase(key);
  }
  if (v.version == 0) v.create_revision = rev;
  v.value = value;
  v.mod_revision = rev;
  ++v.version;
  v.lease = lease;
  if (lease != 0) leases_.at(lease).keys.insert(key);
  history_.push_back({KvEvent::Type::kPut, {key, value, v.create_revision, rev, v.version, lease}});
  return true;
}

bool MemKv::DeleteLocked(const std::string& key, const std::string& range_end) {
  const int64_t rev = revision_ + 1;
  bool changed = false;
  auto it = keys_.lower_bound(key);
  while (it != keys_.end() && InRange(it->first, key, range_end)) {
    if (it->second.lease != 0) {
      auto lease = leases_.find(it->second.lease);
      if (lease != leases_.end()) lease->second.keys.erase(it->first);
    }
    KvPair gone;
    gone.key = it->first;
    gone.mod_revision = rev;
    history_.push_back({KvEvent::Type::kDelete, std::move(gone)});
    it = keys_.erase(it);
    changed = true;
    if (range_end.empty()) break;
  }
  return changed;
}

void MemKv::Commit() {
  ++revision_;
  if (options_.keep_revisions > 0 && revision_ - options_.keep_revisions > compacted_) {
    compacted_ = revision_ - options_.keep_revisions;
    while (!history_.empty() && history_.front().kv.mod_revision < compacted_) history_.pop_front();
  }
  changed_.NotifyAll();
}

Result<KvRange> MemKv::Range(const std::string& key, const std::string& range_end, int64_t limit) {
  BeforeCall("Range");
  MutexLock l(&mu_);
  HOARD_RETURN_IF_ERROR(Fault());
  ExpireLeases();
  KvRange r;
  r.kvs = RangeLocked(key, range_end, limit, &r.more);
  r.revision = revision_;
  return r;
}

Result<KvTxnResult> MemKv::Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                               const std::vector<KvOp>& failure) {
  BeforeCall("Txn");
  MutexLock l(&mu_);
  HOARD_RETURN_IF_ERROR(Fault());
  ExpireLeases();
  if (RequestBytes(compare, success, failure) > kEtcdMaxRequestBytes) {
    return Status::InvalidArgument("etcdserver: request is too large");
  }
  if (compare.size() > kEtcdMaxTxnOps || success.size() > kEtcdMaxTxnOps || failure.size() > kEtcdMaxTxnOps) {
    return Status::InvalidArgument("etcdserver: too many operations in txn request");
  }
  HOARD_RETURN_IF_ERROR(CheckShape(success));
  HOARD_RETURN_IF_ERROR(CheckShape(failure));
  KvTxnResult result;
  result.succeeded = std::all_of(compare.begin(), compare.end(), [&](const KvCompare& c) {
    mu_.AssertHeld();
    return CompareHolds(c);
  });
  const auto& ops = result.succeeded ? success : failure;
  HOARD_RETURN_IF_ERROR(CheckLeases(ops));
  bool changed = false;
  for (const auto& op : ops) {
    switch (op.kind) {
      case KvOp::Kind::kPut: changed |= PutLocked(op.key, op.value, op.lease); break;
      case KvOp::Kind::kDelete: changed |= DeleteLocked(op.key, op.range_end); break;
      case KvOp::Kind::kRange: {
        bool more = false;
        result.ranges.push_back(RangeLocked(op.key, op.range_end, op.limit, &more));
        break;
      }
    }
  }
  if (changed) Commit();
  result.revision = revision_;
  if (lose_txn_replies_ > 0) {
    --lose_txn_replies_;
    return Status::Unavailable("MemKv: the transaction was applied but its reply was lost (injected)");
  }
  return result;
}

Result<int64_t> MemKv::LeaseGrant(std::chrono::seconds ttl) {
  BeforeCall("LeaseGrant");
  MutexLock l(&mu_);
  HOARD_RETURN_IF_ERROR(Fault());
  ExpireLeases();
  // etcd raises a TTL below its minimum (about 1.5 election timeouts) to
  // that minimum instead of refusing it.
  ttl = std::max(ttl, std::chrono::seconds(1));
  const int64_t id = next_lease_++;
  leases_[id] = Lease{ttl, clock_->Now() + ttl, {}};
  return id;
}

Result<std::chrono::seconds> MemKv::LeaseKeepAlive(int64_t lease) {
  BeforeCall("LeaseKeepAlive");
  MutexLock l(&mu_);
  HOARD_RETURN_IF_ERROR(Fault());
  ExpireLeases();
  auto it = leases_.find(lease);
  if (it == leases_.end()) return Status::NotFound("etcdserver: requested lease not found");
  it->second.expiry = clock_->Now() + it->second.ttl;
  return it->second.ttl;
}

Status MemKv::LeaseRevoke(int64_t lease) {
  BeforeCall("LeaseRevoke");
  MutexLock l(&mu_);
  HOARD_RETURN_IF_ERROR(Fault());
  ExpireLeases();
  RevokeLocked(lease);
  return Status::Ok();
}

Result<KvEvents> MemKv::WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                                   std::chrono::milliseconds timeout) {
  BeforeCall("WaitEvents");
  MutexLock l(&mu_);
  HOARD_RETURN_IF_ERROR(Fault());
  const auto deadline = clock_->Now() + timeout;
  for (;;) {
    if (unavailable_) return Status::Unavailable("MemKv: unavailable (partitioned by the test)");
    ExpireLeases();
    // etcd's watch from start_revision = after + 1 is compacted when that is
    // below the compaction revision.
    if (after_revision + 1 < compacted_) {
      return Status::Stale("mvcc: required revision has been compacted (after " + std::to_string(after_revision) +
                           ", compacted at " + std::to_string(compacted_) + ")");
    }
    KvEvents out;
    for (const auto& e : history_) {
      if (e.kv.mod_revision > after_revision && InRange(e.kv.key, key, range_end)) out.events.push_back(e);
    }
    if (!out.events.empty()) {
      out.revision = out.events.back().kv.mod_revision;
      return out;
    }
    const auto now = clock_->Now();
    if (now >= deadline) {
      out.revision = std::max(revision_, after_revision);
      return out;
    }
    // Wake for the next lease expiry too: it is a change (its keys go).
    auto until = deadline;
    for (const auto& [id, lease] : leases_) until = std::min(until, lease.expiry);
    clock_->WaitUntil(&changed_, &mu_, until);
  }
}

Result<std::vector<KvMember>> MemKv::Members() {
  BeforeCall("Members");
  MutexLock l(&mu_);
  KvMember m;
  m.name = "mem";
  m.endpoint = "mem://";
  m.healthy = !unavailable_;
  m.leader = m.healthy;
  if (!m.healthy) m.error = "unavailable (partitioned by the test)";
  for (const auto& [k, v] : keys_) m.db_size_bytes += static_cast<int64_t>(k.size() + v.value.size());
  return std::vector<KvMember>{m};
}

Status MemKv::Compact(int64_t revision) {
  MutexLock l(&mu_);
  if (revision <= compacted_) return Status::Stale("mvcc: required revision has been compacted");
  if (revision > revision_) return Status::InvalidArgument("mvcc: required revision is a future revision");
  compacted_ = revision;
  while (!history_.empty() && history_.front().kv.mod_revision < compacted_) history_.pop_front();
  return Status::Ok();
}

int64_t MemKv::revision() const {
  MutexLock l(&mu_);
  return revision_;
}

void MemKv::FailNext(int n, Status status) {
  MutexLock l(&mu_);
  fail_next_ = n;
  fail_status_ = std::move(status);
}

void MemKv::SetUnavailable(bool unavailable) {
  MutexLock l(&mu_);
  unavailable_ = unavailable;
  changed_.NotifyAll();
}

void MemKv::LoseNextTxnReplies(int n) {
  MutexLock l(&mu_);
  lose_txn_replies_ = n;
}

void MemKv::SetBeforeCallHook(std::function<void(std::string_view call)> hook) {
  MutexLock l(&mu_);
  before_call_ = std::move(hook);
}

}  // namespace hoard
