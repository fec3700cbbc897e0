// File: common/latency_window.h
//
// LatencyWindow keeps the latencies of recent answers of one kind (a chunk
// asked of a peer) and says how long the next request may go unanswered
// before somebody else is asked too (a hedge, common/hedger.h):
//
//   delay = clamp(multiple x p99 of the window, floor, cap)
//
// The window is the last `capacity` samples that are not older than
// `max_age`: recent enough to follow a cluster that slows down (a first pass,
// where owners read through from NFS) or speeds up again, and large enough
// that one outlier does not move the p99 (of 256 samples, the p99 is the
// third largest). With fewer than `min_samples` samples in the window the
// delay is the cap: with no basis to call a request slow, only a stall is.
//
// Only answers are samples: a request that got none (its peer was stopped,
// the call timed out) says nothing about how long answers take, and would
// pin the p99 at the timeout.
//
//   LatencyWindow w({}, Clock::Real());
//   w.Record(took);
//   std::chrono::nanoseconds wait = w.HedgeDelay();
//
// Thread-safety: all methods may be called from any thread (one mutex;
// HedgeDelay sorts a copy of at most `capacity` samples, about a microsecond
// for 256).
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

namespace hoard {

class LatencyWindow {
 public:
  struct Options {
    // The most recent samples kept.
    size_t capacity = 256;
    // Older samples no longer count: a delay learnt in another phase of the
    // workload (an hour ago, before a pause) is not this one's.
    std::chrono::milliseconds max_age{60000};
    // Fewer samples than this in the window: the delay is `cap`.
    size_t min_samples = 20;
    // The delay is this many times the window's `quantile`...
    double multiple = 4.0;
    double quantile = 0.99;
    // ... but never shorter than `floor` (a hedge costs a second transfer:
    // not worth it for a wait no reader notices) nor longer than `cap` (the
    // longest a reader waits on a source that stopped answering).
    std::chrono::milliseconds floor{100};
    std::chrono::milliseconds cap{1000};
  };

  // `clock` outlives the window.
  LatencyWindow(Options options, const Clock* clock);

  // One answer that took `latency`.
  void Record(std::chrono::nanoseconds latency);

  // How long the next request may go unanswered before it is hedged (above).
  std::chrono::nanoseconds HedgeDelay() const;

  // The `q` quantile (0 < q <= 1) of the samples in the window; zero when
  // there are fewer than `min_samples`. `samples`, if given, receives how
  // many there are.
  std::chrono::nanoseconds Quantile(double q, size_t* samples = nullptr) const;

  const Options& options() const { return options_; }

 private:
  struct Sample {
    std::chrono::steady_clock::time_point at;
    std::chrono::nanoseconds latency;
  };

  const Options options_;
  const Clock* clock_;
  mutable Mutex mu_;
  std::vector<Sample> ring_ GUARDED_BY(mu_);  // at most options_.capacity
  size_t next_ GUARDED_BY(mu_) = 0;           // where the next sample goes once ring_ is full
};

}  // namespace hoard
