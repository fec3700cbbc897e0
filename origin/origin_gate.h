// File: origin/origin_gate.h
//
// OriginGate bounds what one node asks of the central storage: at most
// `connections` origin reads in flight and, on average, `bytes_per_s`. The
// node agent sets both to its share of the cluster-wide limits in the cluster
// map (proto::OriginLimits), so the whole cluster stays within them however
// many nodes warm at once.
//
// Demand before warm-up: a reader waiting on a miss must not queue behind the
// background warm-up. A freed slot goes to a waiting demand read first, and
// the byte budget is spent by demand reads without waiting (they may run it
// up to one burst into debt), while warm-up reads wait until the budget is
// positive again. So demand reads are never slower than the limit allows and
// warm-up fills what demand leaves.
//
// Slots are held for the origin part of a fill (open, reads, the attribute
// check); Pace() is called per read with its size, before the read. A warm-up
// read that a demand reader starts waiting for (it joined the warm-up's
// single flight) is promoted: the caller passes an `urgent` flag that the
// filler sets, then calls Wake(), and from then on the read is treated as a
// demand read.
//
// Thread-safety: all methods may be called from any thread. SetLimits wakes
// waiters, so lowering or raising a limit takes effect at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"
#include "proto/messages.h"

namespace hoard {

class OriginGate {
 public:
  enum class Priority { kDemand, kWarm };
  struct Limits {
    int connections = 0;     // origin reads in flight; 0 = unlimited
    double bytes_per_s = 0;  // average; 0 = unlimited
    bool operator==(const Limits&) const = default;
  };

  // Held while a fill reads the origin; releases its slot when destroyed.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
    Slot& operator=(Slot&& o) noexcept;
    ~Slot() { Release(); }
    void Release();
    bool held() const { return gate_ != nullptr; }

   private:
    friend class OriginGate;
    explicit Slot(OriginGate* gate) : gate_(gate) {}
    OriginGate* gate_ = nullptr;
  };

  OriginGate();  // no limits
  // `clock` (it paces the byte rate) outlives the gate.
  explicit OriginGate(Limits limits, const Clock* clock = Clock::Real());

  void SetLimits(Limits limits);
  Limits limits() const;

  // Waits for a free slot (demand first). `urgent`, if given and set, makes a
  // warm-up caller a demand one.
  Slot Acquire(Priority priority, const std::atomic<bool>* urgent = nullptr);
  // Waits until `bytes` may be read under the byte rate (demand first).
  void Pace(Priority priority, uint64_t bytes, const std::atomic<bool>* urgent = nullptr);
  // Makes waiters look at their `urgent` flags again.
  void Wake();

  // For metrics and tests.
  int in_flight() const;
  uint64_t warm_waits() const;  // times a warm-up read waited for demand or a slot
  int demand_waiting() const;   // demand reads waiting for a slot now

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  void ReleaseSlot() EXCLUDES(mu_);
  // Adds what the rate earned since last_refill_.
  void RefillLocked(TimePoint now) REQUIRES(mu_);
  double BurstLocked() const REQUIRES(mu_);

  const Clock* const clock_;
  mutable Mutex mu_;
  CondVar cv_;
  Limits limits_ GUARDED_BY(mu_);
  int in_flight_ GUARDED_BY(mu_) = 0;
  int demand_waiting_ GUARDED_BY(mu_) = 0;  // for slots
  int demand_pacing_ GUARDED_BY(mu_) = 0;   // demand reads waiting for budget
  double tokens_ GUARDED_BY(mu_) = 0;       // bytes; may go negative
  TimePoint last_refill_ GUARDED_BY(mu_);
  uint64_t warm_waits_ GUARDED_BY(mu_) = 0;
};

// A node's share of the cluster-wide limits in `map`: in proportion to its
// placement weight among the up members with a positive one (a node down but
// held keeps its weight but gets no share; a node without one, draining or
// not yet a member, gets an equal share of the up members), at
// least one connection, and never more connections than `node_max` (the
// node's own pool; also the limit when the cluster sets none).
OriginGate::Limits NodeShareOfOriginLimits(const proto::ClusterMap& map, std::string_view self, int node_max);

}  // namespace hoard
