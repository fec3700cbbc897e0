// File: checkpoint/lock_waiter.h
//
// LockWaiter answers blocking lock requests (fcntl F_SETLKW, flock without
// LOCK_NB) off the FUSE worker threads. A lock can be held for hours; a
// worker that slept until it is free would be lost to every other request of
// the mount meanwhile, and a few waiters would stall the mount. So the
// handler makes one attempt and, if the lock is taken, hands the request
// here: one thread tries each waiting request again, less often the longer it
// waits (5 ms doubling to 200 ms), and replies once it is granted, fails, or
// its caller was interrupted (a signal: EINTR, as fcntl and flock say).
//
// The mount has one: CkptFs owns it (checkpoint locks are the ones held for
// long, by jobs on other nodes), and the dataset tree's node-local locks
// (fuse/dataset_fs.h) wait in it too.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <chrono>
#include <functional>
#include <list>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hoard::fuse {

class LockWaiter {
 public:
  // One attempt: 0 granted, EAGAIN still taken (try again), else the errno
  // to reply.
  using Attempt = std::function<int()>;

  // `clock` times the retries (tests pass a FakeClock).
  explicit LockWaiter(Clock* clock = Clock::Real());
  // Replies ENOLCK to whatever still waits (the mount is going away).
  ~LockWaiter();

  // Replies to `req` with `attempt`'s result once it is not EAGAIN.
  void Wait(fuse_req_t req, Attempt attempt);
  // The session is going away: replies ENOLCK to whatever waits, and to
  // every later Wait, at once (a reply after the session is gone would use
  // freed memory).
  void Abandon() EXCLUDES(mu_);
  // Requests waiting now.
  int waiting() const EXCLUDES(mu_);

 private:
  struct Waiter {
    fuse_req_t req;
    Attempt attempt;
    std::chrono::steady_clock::time_point next;
    std::chrono::milliseconds backoff;
  };
  void Loop() EXCLUDES(mu_);

  Clock* const clock_;
  mutable Mutex mu_;
  CondVar cv_;
  std::list<Waiter> waiters_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  bool abandoned_ GUARDED_BY(mu_) = false;
  bool in_attempt_ GUARDED_BY(mu_) = false;  // the loop runs an attempt unlocked
  CondVar attempt_done_;
  std::thread thread_;
};

}  // namespace hoard::fuse
