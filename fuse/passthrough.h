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
// libfuse 3.14 predates passthrough, so this class negotiates it itself:
//   - Install puts custom I/O on the mounted session whose writev adds
//     FUSE_PASSTHROUGH and a stack depth of 1 to the INIT reply (the first
//     reply a session sends). A kernel without passthrough ignores them.
//     The same patch asks for FUSE_DIRECT_IO_ALLOW_MMAP when the INIT
//     request (seen by the custom read) offers it along with passthrough
//     (Linux 6.9; the flag's first kernels mishandled such mappings): then a
//     file opened with direct_io can still be mapped shared, which checkpoint
//     files opened for writing need (checkpoint/ckpt_fs.h).
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
// Thread-safety: all methods from any thread; one mutex guards the table.
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312  // as fuse/hoard_fs.h
#endif
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hoard::fuse {

class Passthrough {
 public:
  explicit Passthrough(std::shared_ptr<spdlog::logger> logger) : logger_(std::move(logger)) {}

  // Puts custom I/O on `se`, which must be mounted and not yet looping (its
  // INIT not answered), and forgets any earlier session's opens. `writev` is
  // the session's writev: it gets the session's userdata and must call this
  // object's Writev. Returns false (and passthrough stays off) if libfuse
  // refuses.
  // `read` likewise must call Read.
  using WritevFn = ssize_t (*)(int fd, iovec* iov, int count, void* userdata);
  using ReadFn = ssize_t (*)(int fd, void* buf, size_t len, void* userdata);
  bool Install(fuse_session* se, WritevFn writev, ReadFn read);

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

  // The session's writev: patches the INIT reply, sends everything else as is.
  ssize_t Writev(int fd, iovec* iov, int count);
  // The session's read: notes what the INIT request offers.
  ssize_t Read(int fd, void* buf, size_t len);

 private:
  struct Inode {
    uint32_t cached = 0;       // opens in the kernel's cached mode
    uint32_t passthrough = 0;  // opens backed by backing_id
    int32_t backing_id = -1;
  };

  void CloseBacking(int32_t id);
  void Disable(int err);

  std::shared_ptr<spdlog::logger> logger_;
  std::atomic<fuse_session*> se_{nullptr};  // set by Install, before the session loops
  std::atomic<bool> enabled_{false};
  std::atomic<bool> init_replied_{false};
  std::atomic<bool> init_read_{false};
  std::atomic<uint32_t> kernel_flags2_{0};  // the INIT request's flags2; written before init_read_
  std::atomic<bool> direct_io_mmap_{false};
  mutable Mutex mu_;
  std::unordered_map<fuse_ino_t, Inode> inodes_ GUARDED_BY(mu_);  // only inodes with opens
};

}  // namespace hoard::fuse
