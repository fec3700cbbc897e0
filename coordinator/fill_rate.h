// File: coordinator/fill_rate.h
//
// FillRate turns the cached-byte counts that nodes report into the rate at
// which a dataset is being filled, for the rate and ETA of `hoard status` and
// `hoard warm`. It counts only increases of a node's report (bytes that landed
// in a cache), so a node that drops copies it no longer owns, or a report
// lost to a restart, never makes the rate negative or jump.
//
// The rate is over the last `window` (10 s): from the last sample at or before
// the window's start (or the first sample, early in a warm-up) to now, so it
// falls to zero within one window after filling stops. Reports arrive once a
// heartbeat (1 s), so the first bytes after a pause count as filled over the
// second before them.
//
// Thread-safety: none; the coordinator calls it under its mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

namespace hoard {

class FillRate {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit FillRate(std::chrono::milliseconds window = std::chrono::seconds(10)) : window_(window) {}

  // `bytes` more landed in caches at `now`.
  void Add(TimePoint now, uint64_t bytes);
  // Bytes per second over the window ending at `now`; 0 with no data.
  double Rate(TimePoint now) const;

 private:
  struct Sample {
    TimePoint at;
    uint64_t filled;  // total bytes added as of `at`
  };
  std::chrono::milliseconds window_;
  uint64_t filled_ = 0;
  std::deque<Sample> samples_;  // oldest first; one per 100 ms at most
};

}  // namespace hoard
