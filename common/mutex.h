// File: common/mutex.h
//
// The lock types of hoard: `Mutex`, the scoped `MutexLock` and `CondVar`.
// They are std::mutex and std::condition_variable with clang's thread-safety
// annotations (common/thread_annotations.h), so that GUARDED_BY members and
// REQUIRES functions are checked at compile time (`scripts/check-threads`).
// libstdc++'s own types carry no annotations, hence these thin wrappers, as in
// leveldb's port::Mutex and abseil's absl::Mutex.
//
// Thread-safety: all three are safe to use from any thread, like the std types
// they wrap. A Mutex is not recursive; it is neither copyable nor movable.
//
//   Mutex mu_;
//   CondVar changed_;
//   int ready_ GUARDED_BY(mu_) = 0;
//
//   void Wait() EXCLUDES(mu_) {
//     MutexLock l(&mu_);
//     while (ready_ == 0) changed_.Wait(&mu_);
//   }
//
// A predicate passed to CondVar::Wait runs with the lock held, but the
// analysis checks a lambda on its own: start it with `mu_.AssertHeld();` (or
// write the loop above).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "common/thread_annotations.h"

namespace hoard {

class CondVar;

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the lock is held where it cannot see it (a predicate
  // lambda run by CondVar::Wait). std::mutex has no owner to check at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction. Unlock()/Lock() drop and take
// it again in between (around a blocking call); the destructor releases it
// only if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  // Takes over `mu`, already held (after a successful TryLock).
  MutexLock(Mutex* mu, std::adopt_lock_t) REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// Releases `mu` from construction to destruction: the opposite of MutexLock,
// for a call that must run without a lock its caller holds.
class SCOPED_CAPABILITY MutexUnlock {
 public:
  explicit MutexUnlock(Mutex* mu) RELEASE(mu) : mu_(mu) { mu_->Unlock(); }
  ~MutexUnlock() ACQUIRE() { mu_->Lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable waited on with a Mutex held. Waits may wake spuriously:
// always wait in a loop on the condition (or pass a predicate).
class CondVar {
 public:
  using Clock = std::chrono::steady_clock;

  void Wait(Mutex* mu) REQUIRES(mu) {
    // The lock is the caller's: adopt it for the wait, hand it back after.
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  template <class Predicate>
  void Wait(Mutex* mu, Predicate done) REQUIRES(mu) {
    while (!done()) Wait(mu);
  }
  // False when `deadline` passed before a notification (the lock is held
  // again either way).
  bool WaitUntil(Mutex* mu, Clock::time_point deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  // Waits until done() or the deadline; returns done() as last evaluated.
  template <class Predicate>
  bool WaitUntil(Mutex* mu, Clock::time_point deadline, Predicate done) REQUIRES(mu) {
    while (!done()) {
      if (!WaitUntil(mu, deadline)) return done();
    }
    return true;
  }
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    return WaitUntil(mu, Clock::now() + timeout);
  }
  template <class Rep, class Period, class Predicate>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Predicate done) REQUIRES(mu) {
    return WaitUntil(mu, Clock::now() + timeout, std::move(done));
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace hoard
