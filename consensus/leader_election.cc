#include "consensus/leader_election.h"

#include <algorithm>
#include <utility>

namespace hoard {

namespace {
// A failed renewal is tried again this often, until the term's deadline.
constexpr std::chrono::milliseconds kRenewRetry{200};
}  // namespace

LeaderElection::LeaderElection(Kv* kv, Options options) : kv_(kv), options_(std::move(options)) {}

LeaderElection::~LeaderElection() { Stop(); }

Result<Fence> LeaderElection::Campaign() {
  {
    // A previous term's renewer must be gone before a new term starts.
    MutexLock lock(&thread_mu_);
    if (renewer_.joinable()) renewer_.join();
  }
  bool logged_unreachable = false;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return Status::Unavailable("leader election stopped");
    }
    // Look first, so that a standby does not take a lease per look.
    Result<KvRange> seen = kv_->Range(options_.key);
    if (seen.ok() && !seen->kvs.empty()) {
      {
        MutexLock lock(&mu_);
        if (leader_ != seen->kvs[0].value) {
          options_.logger->info("the leader is {} (term {})", seen->kvs[0].value, seen->kvs[0].create_revision);
        }
        leader_ = seen->kvs[0].value;
      }
      logged_unreachable = false;
      // Wait for the key to go (or for a while, then look again).
      Result<KvEvents> ev = kv_->WaitEvents(options_.key, "", seen->revision, options_.poll);
      if (!ev.ok()) {
        MutexLock lock(&mu_);
        if (!stopping_) options_.clock->WaitFor(&changed_, &mu_, options_.poll);
      }
      continue;
    }
    Status failed = seen.status();
    if (seen.ok()) {
      const auto sent = options_.clock->Now();
      Result<int64_t> lease = kv_->LeaseGrant(options_.ttl);
      if (lease.ok()) {
        Result<KvTxnResult> txn = kv_->Txn({KvCompare::Absent(options_.key)},
                                           {KvOp::Put(options_.key, options_.value, *lease)}, {});
        if (txn.ok() && txn->succeeded) {
          Fence fence{options_.key, txn->revision};
          {
            MutexLock lock(&mu_);
            if (stopping_) {
              // Stop came while this won: give the term straight back.
              lock.Unlock();
              (void)kv_->LeaseRevoke(*lease);
              return Status::Unavailable("leader election stopped");
            }
            leading_ = true;
            lease_ = *lease;
            deadline_ = sent + options_.ttl;
            leader_ = options_.value;
            lost_why_ = Status::Ok();
            ++terms_;
            options_.logger->info("leading (term {}, lease ttl {} s)", fence.create_revision, options_.ttl.count());
          }
          // (A Resign between the two blocks ends the term; the renewer then
          // returns at once, and WaitLost tells the caller.)
          MutexLock tl(&thread_mu_);
          // The first renewal is due ttl/3 after the grant was sent, counted
          // here: the thread may start late.
          renewer_ = std::thread([this, l = *lease, due = sent + options_.ttl / 3] { RenewLoop(l, due); });
          return fence;
        }
        // Lost the race (or the answer): this lease must not keep a key.
        (void)kv_->LeaseRevoke(*lease);
        if (txn.ok()) continue;  // someone else leads: look at who
        failed = txn.status();
      } else {
        failed = lease.status();
      }
    }
    if (!logged_unreachable) {
      options_.logger->warn("cannot campaign for leadership (will retry): {}", failed.ToString());
      logged_unreachable = true;
    }
    MutexLock lock(&mu_);
    if (!stopping_) options_.clock->WaitFor(&changed_, &mu_, options_.poll);
  }
}

void LeaderElection::RenewLoop(int64_t lease, std::chrono::steady_clock::time_point next) {
  for (;;) {
    {
      MutexLock lock(&mu_);
      while (leading_ && !stopping_ && options_.clock->Now() < std::min(next, deadline_)) {
        options_.clock->WaitUntil(&changed_, &mu_, std::min(next, deadline_));
      }
      if (!leading_ || lease_ != lease) return;
      if (options_.clock->Now() >= deadline_) {
        EndTermLocked(Status::Unavailable("the lease could not be renewed before it ran out"));
        break;
      }
      if (stopping_) return;  // Stop() resigns
    }
    const auto sent = options_.clock->Now();
    Result<std::chrono::seconds> ttl = kv_->LeaseKeepAlive(lease);
    MutexLock lock(&mu_);
    if (!leading_ || lease_ != lease) return;
    if (ttl.ok()) {
      deadline_ = sent + *ttl;
      next = sent + options_.ttl / 3;
      continue;
    }
    if (ttl.status().code() == Code::kNotFound) {
      EndTermLocked(Status::Unavailable("etcd says the lease is gone: " + ttl.status().message()));
      break;
    }
    options_.logger->warn("cannot renew the leader's lease (will retry until it runs out): {}",
                          ttl.status().ToString());
    next = options_.clock->Now() + kRenewRetry;
  }
  // The term is over by this process's clock; etcd may still count the lease:
  // revoke it so a standby need not wait for it to run out.
  (void)kv_->LeaseRevoke(lease);
}

void LeaderElection::EndTermLocked(Status why) {
  if (!leading_) return;
  leading_ = false;
  lost_why_ = why;
  options_.logger->warn("no longer leading: {}", why.ToString());
  leader_.clear();
  changed_.NotifyAll();
}

bool LeaderElection::Leading() const {
  MutexLock lock(&mu_);
  return leading_ && options_.clock->Now() < deadline_;
}

Status LeaderElection::WaitLost() {
  MutexLock lock(&mu_);
  while (leading_) {
    if (options_.clock->Now() >= deadline_) {
      // The renewer may be stuck in a call: the term ends by the clock anyway.
      EndTermLocked(Status::Unavailable("the lease could not be renewed before it ran out"));
      break;
    }
    options_.clock->WaitUntil(&changed_, &mu_, deadline_);
  }
  return lost_why_;
}

void LeaderElection::Resign() {
  int64_t lease = 0;
  {
    MutexLock lock(&mu_);
    if (leading_) {
      lease = lease_;
      EndTermLocked(Status::Unavailable("resigned"));
    }
  }
  {
    MutexLock lock(&thread_mu_);
    if (renewer_.joinable()) renewer_.join();
  }
  if (lease != 0) (void)kv_->LeaseRevoke(lease);
}

void LeaderElection::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.NotifyAll();
  }
  Resign();
}

std::string LeaderElection::leader() const {
  MutexLock lock(&mu_);
  return leader_;
}

uint64_t LeaderElection::terms() const {
  MutexLock lock(&mu_);
  return terms_;
}

}  // namespace hoard
