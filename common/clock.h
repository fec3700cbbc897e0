// File: common/clock.h
//
// Time behind an interface, so tests of timeouts (a node marked down after
// silence, a peer that does not answer) run without sleeping.
//
// Components whose behaviour depends on time take a Clock* (default
// Clock::Real()) and both read it (Now) and wait on it (SleepFor, WaitFor): a
// test then drives them with a FakeClock, whose time moves only by Advance, so
// "after 30 s" is a step of the test, not 30 s of it, and "not before 30 s" is
// checked exactly instead of with a sleep that passes whenever the bug is slow.
//
// Thread-safety: implementations are safe to call from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/mutex.h"

namespace hoard {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time; only differences mean anything.
  virtual std::chrono::steady_clock::time_point Now() const = 0;
  // Wall-clock seconds since the epoch, for what users read (logs, status).
  virtual int64_t WallSeconds() const = 0;

  // Blocks the calling thread until Now() has moved `d` on.
  virtual void SleepFor(std::chrono::nanoseconds d) const = 0;
  // Waits on `cv` (holding `mu`) until it is notified or Now() reaches
  // `deadline`; false on the deadline. Like any condition wait it may return
  // early: callers wait in a loop on their condition.
  virtual bool WaitUntil(CondVar* cv, Mutex* mu, std::chrono::steady_clock::time_point deadline) const
      REQUIRES(mu) = 0;
  bool WaitFor(CondVar* cv, Mutex* mu, std::chrono::nanoseconds d) const REQUIRES(mu) {
    return WaitUntil(cv, mu, Now() + d);
  }

  // The process-wide real clock.
  static Clock* Real();
};

// A clock that moves only when told to; for tests. SleepFor returns once
// Advance has moved time past its deadline (it looks every millisecond of real
// time, so Advance needs no list of sleepers to wake). WaitUntil waits one such
// millisecond (or less, when notified) and returns: its caller re-checks its
// condition and waits again, until Advance passes the deadline.
class FakeClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(now_ns_.load()));
  }
  int64_t WallSeconds() const override { return 1'700'000'000 + now_ns_.load() / 1'000'000'000; }
  void SleepFor(std::chrono::nanoseconds d) const override;
  bool WaitUntil(CondVar* cv, Mutex* mu, std::chrono::steady_clock::time_point deadline) const override
      REQUIRES(mu);
  void Advance(std::chrono::nanoseconds d) { now_ns_ += d.count(); }
  // Threads inside SleepFor (or one poll of WaitUntil) now: a test waits for
  // the thread it drives to sleep before it advances time past its deadline.
  int waiters() const { return waiters_.load(); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
  mutable std::atomic<int> waiters_{0};
};

}  // namespace hoard
