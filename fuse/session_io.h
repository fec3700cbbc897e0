// File: fuse/session_io.h
//
// SessionIo is the custom I/O (fuse_session_custom_io) of the mount's FUSE
// session: every request read from /dev/fuse and every reply written to it
// passes through it. It exists so that a hoard-fuse process can take over a
// FUSE connection another hoard-fuse process started, after that one crashed
// or was replaced (fuse/supervisor.h):
//
//   - A fresh session (the mount was just made): the kernel's INIT request is
//     saved to Options::init_file before libfuse sees it.
//   - A takeover: the kernel sends INIT once per connection, and libfuse
//     answers EIO to every request before it has seen one. So the first read
//     returns the saved INIT, under a unique the kernel never issues; libfuse
//     and HoardFs::Init negotiate exactly as the first process did; the reply
//     is not sent (the kernel has its answer). Only then may the other
//     threads read, and FUSE_NOTIFY_RESEND (Linux 6.9) asks the kernel to
//     queue again every request a dead process had read and not answered:
//     they reach this process as new ones (their unique with bit 63 set).
//     Without resend (older kernels) those requests are never answered: a
//     planned restart (SIGHUP) loses none, since the old process answers
//     what it read before it exits; a crash leaves their callers waiting.
//
// The INIT reply, sent or not, goes through Passthrough (fuse/passthrough.h),
// which adds its flags. Nothing else is touched.
//
// Thread-safety: Read and Writev run on every worker thread at once; Install
// before the session loops.
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312  // as fuse/hoard_fs.h
#endif
#include <fuse_lowlevel.h>
#include <sys/uio.h>

#include <atomic>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "fuse/passthrough.h"

namespace hoard::fuse {

class SessionIo {
 public:
  struct Options {
    std::string init_file;  // where the INIT request is kept for a takeover
    bool takeover = false;  // the connection's INIT was answered by an earlier process
    Passthrough* passthrough = nullptr;
    std::shared_ptr<spdlog::logger> logger;
  };
  explicit SessionIo(Options options);

  // Puts this I/O on `se` (mounted, or given as /dev/fd/N, and not yet
  // looping). `read` and `writev` get the session's userdata and must call
  // Read and Writev. In a takeover the saved INIT is loaded first: without
  // one (the last process died before it read INIT) the session starts as a
  // fresh one and asks the kernel to resend at once.
  using WritevFn = ssize_t (*)(int fd, iovec* iov, int count, void* userdata);
  using ReadFn = ssize_t (*)(int fd, void* buf, size_t len, void* userdata);
  Status Install(fuse_session* se, ReadFn read, WritevFn writev);
  // The part of Install that loads the saved INIT (tests call it alone).
  // Returns whether the kernel must be asked to resend at once.
  bool Prepare();

  ssize_t Read(int fd, void* buf, size_t len);
  ssize_t Writev(int fd, iovec* iov, int count);

  // A takeover's replayed INIT has been answered (the session serves).
  bool taken_over() const { return taken_over_.load(std::memory_order_acquire); }
  // The kernel accepted FUSE_NOTIFY_RESEND.
  bool resent() const { return resent_.load(std::memory_order_acquire); }

 private:
  // Asks the kernel to queue again what it sent and got no answer to.
  void Resend(int fd);
  void SaveInit(const void* buf, size_t len);

  Options options_;
  std::string saved_init_;          // the INIT to replay (takeover)
  bool installed_ = false;          // Install ran before (single-threaded, before loops)
  std::atomic<bool> replay_taken_{false};
  std::atomic<bool> init_seen_{false};     // fresh: INIT read and saved
  std::atomic<bool> init_replied_{false};  // fresh: INIT answered
  std::atomic<bool> taken_over_{false};
  std::atomic<bool> resent_{false};
  Mutex mu_;
  CondVar replayed_cv_;
  bool replayed_ GUARDED_BY(mu_) = false;  // the replayed INIT is answered
};

}  // namespace hoard::fuse
