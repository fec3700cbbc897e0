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
// network), or at once when the coordinator marks its node down; its locks
// are then released, as a local file system releases a dead process's.
//
// Locks are not durable. After a coordinator restart (a new `incarnation`
// in the replies) mounts re-assert the locks they hold (reclaim); during
// `lock_grace` after the start only reclaims are granted, so a lock held
// before the restart cannot be taken by someone else meanwhile.
//
// Thread-safety: every method may be called from any thread (one mutex).
// `on_change` is called with that mutex held and must not call back in;
// lock order: CkptSessions, then CkptTable.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/file_locks.h"
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
    // The union over live sessions of holds and writing, after each change.
    std::function<void(std::set<proto::CkptHold> holds, std::set<uint64_t> writing)> on_change;
  };

  explicit CkptSessions(Options options);

  proto::CkptSessionReply Update(const proto::CkptSession& s);
  // kInvalidArgument for a malformed request (no session id, an empty range).
  Result<proto::CkptLockReply> Lock(const proto::CkptLock& req);
  // Ends the sessions not heard from for `timeout`, and those of `down`
  // nodes (the coordinator's view).
  void Expire(const std::set<std::string>& down = {});

  uint64_t incarnation() const { return incarnation_; }
  size_t sessions() const;
  size_t locks() const { return locks_.size(); }

 private:
  struct Session {
    std::string node;
    std::chrono::steady_clock::time_point last;
    std::set<proto::CkptHold> holds;
    std::set<uint64_t> writing;
  };
  Session& TouchLocked(uint64_t mount, const std::string* node);
  void EndLocked(std::map<uint64_t, Session>::iterator it, const char* why);
  void PublishLocked();
  bool InGraceLocked() const;

  Options options_;
  const uint64_t incarnation_;
  const std::chrono::steady_clock::time_point started_;
  mutable std::mutex mu_;
  std::map<uint64_t, Session> sessions_;  // by mount id; guarded by mu_
  FileLocks locks_;                       // changed with mu_ held
};

}  // namespace hoard
