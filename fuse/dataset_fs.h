// File: fuse/dataset_fs.h
//
// DatasetFs is the read-only half of the mount: the root, /datasets and
// every dataset version under it (MOUNT/datasets/NAME/...). HoardFs hands it
// every request on an inode outside the checkpoint range (fuse/hoard_fs.h,
// Route); the other half is CkptFs (checkpoint/ckpt_fs.h), and both have the
// same operations, so that HoardFs routes each request once.
//
// Answers come from memory: names and attributes from the dataset's manifest
// (fuse/namespace.h; inode numbers encode the dataset slot and manifest
// entry, fuse/inode.h), bytes from ChunkReader (fuse/chunk_reader.h) or, for
// a file wholly in one local chunk file, from the kernel itself
// (passthrough, fuse/passthrough.h). Every change is refused with EROFS:
// a dataset is a read-only version of its origin. File locks are this
// node's (a version is the same everywhere and read-only, so only processes
// on one node coordinate through them), kept here.
//
// The operations live in ops_inode.cc (lookup, getattr, readlink), ops_dir.cc
// (opendir, readdir), ops_io.cc (open, read, release, flush) and ops_lock.cc
// (locks); the refusals here.
//
// Thread-safety: every method may be called from any FUSE worker thread. The
// state it reads is shared with the rest of the mount and thread-safe:
// Namespace (lock-free reads, updated by the map watcher), ChunkReader,
// Passthrough, MountStats (atomics) and FileLocks (its own mutex).
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "checkpoint/lock_waiter.h"
#include "cluster/cluster_view.h"
#include "common/file_locks.h"
#include "common/status.h"
#include "fuse/chunk_reader.h"
#include "fuse/mount_stats.h"
#include "fuse/namespace.h"
#include "fuse/passthrough.h"

namespace hoard::fuse {

class DatasetFs {
 public:
  struct Options {
    double dataset_timeout = 3600;  // seconds; entries/attributes inside a dataset
    double top_timeout = 1;         // seconds; the root and /datasets
    int64_t start_time = 0;         // the mount's start: the mtime of the root and /datasets
    std::shared_ptr<spdlog::logger> logger;
  };
  // What the dataset tree shares with the rest of the mount, which owns it
  // and keeps it alive as long as this.
  struct Shared {
    Namespace* ns = nullptr;  // updated by the map watcher (HoardFs)
    // Asked for a fresh map when a lookup misses in /datasets.
    ClusterWatcher* watcher = nullptr;
    ChunkReader* reader = nullptr;
    Passthrough* passthrough = nullptr;
    MountStats* stats = nullptr;
    // The root lists /checkpoints, whose attributes are the checkpoint
    // tree's (CkptFs::StatRoot).
    std::function<void(struct stat*)> stat_checkpoints;
    // Blocking dataset lock requests wait in the mount's one waiter
    // (CkptFs's: checkpoint/lock_waiter.h).
    LockWaiter* lock_waiter = nullptr;
    // "major:minor" of the mount, to find its files among a process's open
    // files (CkptFs::MountDev).
    std::function<const std::string&()> mount_dev;
  };

  DatasetFs(Options options, Shared shared);

  // ---- operations (HoardFs routes them here by inode) ----
  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void ReadLink(fuse_req_t req, fuse_ino_t ino);
  void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus);
  void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
  void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock);
  void SetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep);
  void Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op);
  // Nothing to write back, no attributes of its own (user.hoard.* are the
  // checkpoint tree's).
  void Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }
  void GetXattr(fuse_req_t req, fuse_ino_t, const char*, size_t) { fuse_reply_err(req, ENODATA); }
  void ListXattr(fuse_req_t req, fuse_ino_t, size_t size) {
    if (size == 0) fuse_reply_xattr(req, 0);
    else fuse_reply_buf(req, nullptr, 0);
  }
  // Every change: datasets are read-only versions of their origin (without
  // these the kernel would answer ENOSYS, which tools misread).
  void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { ReadOnly(req); }
  void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { ReadOnly(req); }
  void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t) { ReadOnly(req); }
  void Symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { ReadOnly(req); }
  void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { ReadOnly(req); }
  void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { ReadOnly(req); }
  void Remove(fuse_req_t req, fuse_ino_t, const char*, bool) { ReadOnly(req); }
  // Within the dataset tree (HoardFs answers a rename across trees).
  void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) { ReadOnly(req); }
  void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) { ReadOnly(req); }
  void Fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { ReadOnly(req); }
  // Routed by the destination file, the one it would change.
  void CopyFileRange(fuse_req_t req, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t, fuse_file_info*, size_t,
                     int) {
    ReadOnly(req);
  }
  void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { ReadOnly(req); }

 private:
  static void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }
  // Attributes of an inode; kNotFound (ESTALE at the edge) if it no longer exists.
  Status Stat(fuse_ino_t ino, struct stat* st) const;
  void FillEntry(fuse_ino_t ino, const struct stat& st, fuse_entry_param* e) const;
  // Polls the coordinator now: a name missing from /datasets may have been
  // added a moment ago, and a user who just ran `hoard dataset add` expects
  // to see it at once. Bounded: concurrent callers share one poll with a
  // short timeout, and a coordinator that just failed to answer is not asked
  // again for a second (ClusterWatcher::RefreshForRequest).
  void RefreshNow();
  // The dataset lock in the way of `want` (taking it when `apply`), after
  // dropping the POSIX locks of holders that have closed the file.
  std::optional<FileLock> DatasetConflict(const FileLock& want, bool apply);
  // Takes a dataset lock for `req` and replies (later, when it must wait).
  void TakeLocal(fuse_req_t req, const FileLock& want, bool wait);

  const Options options_;
  const int64_t start_time_;
  Namespace& ns_;
  ClusterWatcher& watcher_;
  ChunkReader& reader_;
  Passthrough& passthrough_;
  MountStats& stats_;
  const std::function<void(struct stat*)> stat_checkpoints_;
  LockWaiter& lock_waiter_;
  const std::function<const std::string&()> mount_dev_;
  FileLocks dataset_locks_;  // session 1: this mount
};

}  // namespace hoard::fuse
