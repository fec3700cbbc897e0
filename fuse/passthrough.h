// File: fuse/passthrough.h
//
// Passthrough has the kernel serve a dataset file's reads straight from the
// local chunk file that holds all its bytes (FUSE passthrough, Linux 6.9 and
// later): after the OPEN, a read costs no request to the mount and no copy
// through it, so a small file read from this node's disk costs two round
// trips (LOOKUP, often answered by READDIRPLUS, and OPEN) instead of three.
// The file must be exactly the chunk's bytes, since the kernel reads the
// backing file to its end: chunk files keep their record in an xattr for
// that (store/chunk_file.h).
//
// libfuse 3.14 predates passthrough, so this class negotiates it itself,
// through the session's custom I/O (fuse/session_io.h), which hands it the
// INIT request and reply:
//   - the INIT reply gets FUSE_PASSTHROUGH and a stack depth of 1. A kernel
//     without passthrough ignores them. The same patch asks for
//     FUSE_DIRECT_IO_ALLOW_MMAP when the INIT request offers it along with
//     passthrough (Linux 6.9; the flag's first kernels mishandled such
//     mappings): then a file opened with direct_io can still be mapped
//     shared, which checkpoint files opened for writing need
//     (checkpoint/ckpt_fs.h).
//   - An open is answered with FOPEN_PASSTHROUGH and a backing id that
//     FUSE_DEV_IOC_BACKING_OPEN registered for the chunk file (it needs
//     CAP_SYS_ADMIN). The first failure of that ioctl (an older kernel, no
//     privilege, a chunk store on a stacked filesystem) turns passthrough
//     off for the mount, logged once; opens are then answered as before.
//
// The kernel's rules for one inode: while it is open for passthrough, every
// open of it must be a passthrough open of the same backing file, and while
// it is open in cached mode, none may be (either mistake fails the user's
// open with EIO). So the class keeps, per inode with open files, how it is
// open, how many times, and its backing id, closed at the last release. The
// kernel forgets an open before it sends us its RELEASE, so this table never
// says "no open files" while the kernel has some.
//
// The table outlives the process (Persist): backing ids belong to the FUSE
// connection, not to the process that registered them, and a server that
// takes over the connection after a crash (fuse/supervisor.h) must answer
// opens of inodes that are still open by the kernel's rules above. Each
// inode with opens has a fixed-size record in a file mapped shared; stores
// into it reach the file's pages at once, so a process killed at any
// instruction leaves every record but the one it was changing intact. (A
// crash between a record's change and the reply the kernel then asks again
// for, FUSE_NOTIFY_RESEND, counts that open or release twice: the inode then
// keeps its backing id until the mount ends, or drops it one release early.)
//
// Thread-safety: all methods from any thread; one mutex guards the table.
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312  // as fuse/hoard_fs.h
#endif
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace hoard::fuse {

class Passthrough {
 public:
  explicit Passthrough(std::shared_ptr<spdlog::logger> logger) : logger_(std::move(logger)) {}

  ~Passthrough();

  // Binds to `se`, mounted and not yet looping (its INIT not answered);
  // `enable`: offer passthrough in the INIT reply. Forgets the opens of any
  // earlier session unless they were loaded by Persist.
  void Start(fuse_session* se, bool enable);
  // Keeps the table in `path` (see the top). `takeover`: load the opens an
  // earlier process of this connection left there; else start it empty.
  // Called before Start; an error leaves the table in memory only.
  Status Persist(const std::string& path, bool takeover);

  // How an open of a dataset file goes.
  struct Decision {
    bool passthrough = false;
    int32_t backing_id = -1;
  };
  // Decides an open of `ino`. `fd` is a local chunk file holding exactly the
  // file's bytes, or -1 (the file is not wholly on this node's disk): then
  // the open is a cached one, unless the inode is open for passthrough
  // already, whose backing file it shares. Every Open is paired with one
  // Release of the same decision, once the kernel has the open (or failed it).
  Decision Open(fuse_ino_t ino, int fd);
  void Release(fuse_ino_t ino, bool passthrough);

  // Answers an OPEN with `fi`'s flags plus FOPEN_PASSTHROUGH and the backing
  // id (libfuse 3.14's fuse_reply_open cannot say either).
  // Returns fuse_reply_buf's result (non-zero: the kernel did not get it).
  static int ReplyOpen(fuse_req_t req, const fuse_file_info& fi, int32_t backing_id);

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // The INIT reply granted FUSE_DIRECT_IO_ALLOW_MMAP: a direct_io open may be
  // mapped shared (without it such an mmap fails with ENODEV).
  bool direct_io_mmap() const { return direct_io_mmap_.load(std::memory_order_acquire); }
  // Inodes with open files that the table follows (tests, and a leak check).
  size_t open_inodes() const {
    MutexLock lock(&mu_);
    return inodes_.size();
  }

  // The INIT request, as read from the kernel (or replayed): notes what it
  // offers.
  void NoteInitRequest(const void* buf, size_t len);
  // Sends the INIT reply `iov` with passthrough's flags added, or only
  // notes what it grants when `send` is false (a takeover: the kernel has
  // its answer). Returns writev's result, or the length when not sending.
  ssize_t SendInitReply(int fd, iovec* iov, int count, bool send);

 private:
  struct Inode {
    uint32_t cached = 0;       // opens in the kernel's cached mode
    uint32_t passthrough = 0;  // opens backed by backing_id
    int32_t backing_id = -1;
    uint32_t record = kNoRecord;  // in the persisted table
  };
  // One inode's line in the persisted table; ino 0 = free.
  struct Record {
    uint64_t ino;
    int32_t backing_id;
    uint32_t cached;
    uint32_t passthrough;
    uint32_t pad;
  };
  static constexpr uint32_t kNoRecord = ~0u;
  static constexpr uint32_t kRecords = 1u << 18;  // inodes open at once (6 MiB, sparse)

  void CloseBacking(int32_t id);
  void Disable(int err);
  // Mirrors `in` into its record (taking one if it has none), or frees the
  // record when the inode has no opens left.
  void Save(fuse_ino_t ino, Inode& in) REQUIRES(mu_);

  std::shared_ptr<spdlog::logger> logger_;
  std::atomic<fuse_session*> se_{nullptr};  // set by Install, before the session loops
  std::atomic<bool> enabled_{false};
  std::atomic<uint32_t> kernel_flags2_{0};  // the INIT request's flags2
  std::atomic<bool> direct_io_mmap_{false};
  mutable Mutex mu_;
  std::unordered_map<fuse_ino_t, Inode> inodes_ GUARDED_BY(mu_);  // only inodes with opens
  Record* records_ GUARDED_BY(mu_) = nullptr;  // the persisted table (mapped), or null
  std::vector<uint32_t> free_records_ GUARDED_BY(mu_);
  bool loaded_ GUARDED_BY(mu_) = false;  // Persist loaded a takeover's opens
  bool table_full_logged_ GUARDED_BY(mu_) = false;
};

}  // namespace hoard::fuse
