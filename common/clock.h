// File: common/clock.h
//
// Time behind an interface, so tests of timeouts (a node marked down after
// silence, a peer that does not answer) run without sleeping.
//
// Thread-safety: implementations are safe to call from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hoard {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time; only differences mean anything.
  virtual std::chrono::steady_clock::time_point Now() const = 0;
  // Wall-clock seconds since the epoch, for what users read (logs, status).
  virtual int64_t WallSeconds() const = 0;

  // The process-wide real clock.
  static Clock* Real();
};

// A clock that moves only when told to; for tests.
class FakeClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(now_ns_.load()));
  }
  int64_t WallSeconds() const override { return 1'700'000'000 + now_ns_.load() / 1'000'000'000; }
  void Advance(std::chrono::nanoseconds d) { now_ns_ += d.count(); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace hoard
