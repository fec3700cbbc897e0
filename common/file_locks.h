// File: common/file_locks.h
//
// FileLocks is a table of advisory file locks with Linux's rules, for one
// authority to keep: the coordinator keeps the checkpoint files' locks for
// every mount of the cluster (so two nodes never both hold conflicting
// locks), and a mount keeps the locks of its read-only dataset files (they
// are the same on every node, so a node-local table is enough there).
//
// Two independent kinds, as on Linux (a flock never conflicts with a POSIX
// lock of the same file):
//   - flock: one lock per (file, owner), shared or exclusive, on the whole
//     file. A new request of an owner that holds one converts it.
//   - POSIX record locks (fcntl F_SETLK; OFD locks are the same with the
//     open file as the owner): byte ranges per owner, shared or exclusive.
//     A request replaces the owner's locks on its range (splitting them at
//     its edges); adjacent or overlapping ranges of one owner and type are
//     merged, so unlocking a part of a range leaves the rest.
// A request conflicts with a lock of another owner on the same file whose
// range overlaps it unless both are shared. Owners are (session, owner): a
// session is one client (a mount), `owner` the kernel's lock owner in it.
//
// Nothing here waits: Set answers the lock in the way, and a caller that
// must block asks again (the mount, while its FUSE request is not
// interrupted).
//
// Thread-safety: every method is thread-safe (one mutex).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/mutex.h"

namespace hoard {

enum class LockType : uint8_t { kUnlock = 0, kRead = 1, kWrite = 2 };

struct FileLock {
  uint64_t file = 0;
  uint64_t session = 0;
  uint64_t owner = 0;
  bool flock = false;  // a flock (whole file) rather than a POSIX range
  LockType type = LockType::kUnlock;
  uint64_t start = 0;
  uint64_t end = UINT64_MAX;  // inclusive
  uint32_t pid = 0;           // reported by Test (F_GETLK)
  bool operator==(const FileLock&) const = default;
};

class FileLocks {
 public:
  // Takes or (kUnlock) releases `req`. Returns the lock in the way, and
  // changes nothing, when a lock of another owner conflicts; nullopt when
  // applied. An unlock never conflicts.
  std::optional<FileLock> Set(const FileLock& req);
  // The lock Set(req) would be refused for, if any (F_GETLK). Changes nothing.
  std::optional<FileLock> Test(const FileLock& req) const;
  // Drops every lock of (session, owner) on `file`: POSIX locks when
  // `flock` is false (a close(2) by that owner), the flock when true (the
  // last close of the open file that took it).
  void ReleaseOwner(uint64_t file, uint64_t session, uint64_t owner, bool flock);
  // Drops every lock of `session` (the mount is gone); returns how many.
  size_t DropSession(uint64_t session);
  // Every lock `session` holds (what a mount re-asserts after a restart of
  // the authority).
  std::vector<FileLock> Held(uint64_t session) const;
  size_t size() const;

 private:
  struct Owner {
    uint64_t session = 0;
    uint64_t owner = 0;
    auto operator<=>(const Owner&) const = default;
  };
  struct Range {
    uint64_t start = 0;
    uint64_t end = 0;
    LockType type = LockType::kRead;
    uint32_t pid = 0;
  };
  struct File {
    std::map<Owner, std::pair<LockType, uint32_t>> flocks;  // type, pid
    std::map<Owner, std::vector<Range>> ranges;             // sorted by start, disjoint
    bool empty() const { return flocks.empty() && ranges.empty(); }
  };
  std::optional<FileLock> ConflictLocked(const FileLock& req) const REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<uint64_t, File> files_ GUARDED_BY(mu_);
};

}  // namespace hoard
