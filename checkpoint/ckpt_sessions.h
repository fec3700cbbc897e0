// File: checkpoint/ckpt_sessions.h
//
// CkptSessions is the coordinator's record of the mounts that use the
// checkpoint namespace right now (proto::CkptSession), and the cluster's one
// table of checkpoint file locks (common/file_locks.h), so that two nodes
// never both hold conflicting flock or fcntl locks on a file.
//
// A session is one mount process (a random id it picks at start). It says,
// every couple of seconds while it has files open or locks held, which
// generations its open files read (`holds`: CkptTable keeps those
// generations' copies) and which files it has open for writing (`writing`:
// not drained meanwhile). Each message replaces the last. A session ends
// when it has not been heard from for `timeout` (the mount died or lost the
// network); its locks are then released, as a local file system releases a
// dead process's. (Not when its node agent is marked down: the mount is
// another process, and may well be alive and locking.)
//
// Locks are not durable. After a coordinator restart, or when a session had
// ended and its mount speaks again (a `fresh` reply), the mount re-asserts
// the locks it holds (reclaim); during `lock_grace` after a start only
// reclaims are granted, so a lock held before the restart cannot be taken by
// someone else meanwhile. A reclaim that conflicts with a lock someone took
// meanwhile is refused and reported lost.
//
// Thread-safety: every method may be called from any thread (one mutex).
// `on_change` is called with that mutex held and must not call back in;
// lock order: CkptSessions, then CkptTable.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/file_locks.h"
#include "common/mutex.h"
#include "common/result.h"
#include "proto/messages.h"

namespace hoard {

class CkptSessions {
 public:
  struct Options {
    std::chrono::milliseconds timeout{std::chrono::seconds(10)};
    std::chrono::milliseconds lock_grace{std::chrono::seconds(6)};
    Clock* clock = Clock::Real();
    std::shared_ptr<spdlog::logger> logger;  // required
    // The union over live sessions of holds and writing, after each change,
    // with the session that reported (0 after an expiry) and what it writes.
    std::function<void(std::set<proto::CkptHold> holds, std::set<uint64_t> writing, uint64_t mount,
                       const std::set<uint64_t>& mount_writing)>
        on_change;
  };

  explicit CkptSessions(Options options);

  proto::CkptSessionReply Update(const proto::CkptSession& s);
  // kInvalidArgument for a malformed request (no session id, an empty range).
  Result<proto::CkptLockReply> Lock(const proto::CkptLock& req);
  // Ends the sessions not heard from for `timeout`.
  void Expire();

  uint64_t incarnation() const { return incarnation_; }
  size_t sessions() const;
  // Sessions that hold generations (have checkpoint files open for reading).
  size_t reading() const;
  size_t locks() const { return locks_.size(); }

 private:
  struct Session {
    std::string node;
    std::chrono::steady_clock::time_point last;
    std::set<proto::CkptHold> holds;
    std::set<uint64_t> writing;
  };
  // The session of `mount`, made if new (`*fresh` then true).
  Session& TouchLocked(uint64_t mount, const std::string* node, bool* fresh = nullptr) REQUIRES(mu_);
  void EndLocked(std::map<uint64_t, Session>::iterator it, const char* why) REQUIRES(mu_);
  void PublishLocked(uint64_t mount = 0, const std::set<uint64_t>& mount_writing = {}) REQUIRES(mu_);
  bool InGraceLocked() const REQUIRES(mu_);

  Options options_;
  const uint64_t incarnation_;
  const std::chrono::steady_clock::time_point started_;
  mutable Mutex mu_;
  std::map<uint64_t, Session> sessions_ GUARDED_BY(mu_);  // by mount id
  // Thread-safe itself (locks() reads it without mu_), but changed with mu_
  // held so that it agrees with sessions_.
  FileLocks locks_;
};

}  // namespace hoard
