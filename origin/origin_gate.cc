#include "origin/origin_gate.h"

#include <algorithm>

namespace hoard {

OriginGate::Slot& OriginGate::Slot::operator=(Slot&& o) noexcept {
  if (this != &o) {
    Release();
    gate_ = o.gate_;
    o.gate_ = nullptr;
  }
  return *this;
}

void OriginGate::Slot::Release() {
  if (gate_ != nullptr) gate_->ReleaseSlot();
  gate_ = nullptr;
}

OriginGate::OriginGate() : OriginGate(Limits{}) {}

OriginGate::OriginGate(Limits limits, const Clock* clock) : clock_(clock), limits_(limits), last_refill_(clock->Now()) {
  tokens_ = BurstLocked();
}

void OriginGate::SetLimits(Limits limits) {
  {
    MutexLock lock(&mu_);
    if (limits == limits_) return;
    RefillLocked(clock_->Now());
    limits_ = limits;
    tokens_ = std::min(tokens_, BurstLocked());
  }
  cv_.NotifyAll();
}

OriginGate::Limits OriginGate::limits() const {
  MutexLock lock(&mu_);
  return limits_;
}

int OriginGate::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

uint64_t OriginGate::warm_waits() const {
  MutexLock lock(&mu_);
  return warm_waits_;
}

int OriginGate::demand_waiting() const {
  MutexLock lock(&mu_);
  return demand_waiting_;
}

void OriginGate::Wake() {
  { MutexLock lock(&mu_); }  // a waiter between its check and its wait sees the flag or gets the notify
  cv_.NotifyAll();
}

OriginGate::Slot OriginGate::Acquire(Priority priority, const std::atomic<bool>* urgent) {
  MutexLock lock(&mu_);
  auto free = [&] {
    mu_.AssertHeld();
    return limits_.connections <= 0 || in_flight_ < limits_.connections;
  };
  auto is_urgent = [&] { return urgent != nullptr && urgent->load(); };
  if (priority == Priority::kWarm && !is_urgent()) {
    if (!(free() && demand_waiting_ == 0)) ++warm_waits_;
    while (!((free() && demand_waiting_ == 0) || is_urgent())) cv_.Wait(&mu_);
    if (!is_urgent() || free()) {
      ++in_flight_;
      return Slot(this);
    }
  }
  ++demand_waiting_;
  while (!free()) cv_.Wait(&mu_);
  --demand_waiting_;
  ++in_flight_;
  return Slot(this);
}

void OriginGate::ReleaseSlot() {
  {
    MutexLock lock(&mu_);
    --in_flight_;
  }
  cv_.NotifyAll();
}

double OriginGate::BurstLocked() const {
  // A twentieth of a second of the rate, at least one 1 MiB read: enough to
  // keep a link busy between refills, small enough that a burst does not
  // overrun the limit noticeably.
  return std::max(limits_.bytes_per_s / 20, double(1 << 20));
}

void OriginGate::RefillLocked(TimePoint now) {
  if (limits_.bytes_per_s > 0) {
    const double earned = std::chrono::duration<double>(now - last_refill_).count() * limits_.bytes_per_s;
    tokens_ = std::min(BurstLocked(), tokens_ + earned);
  }
  last_refill_ = now;
}

void OriginGate::Pace(Priority priority, uint64_t bytes, const std::atomic<bool>* urgent) {
  if (urgent != nullptr && urgent->load()) priority = Priority::kDemand;
  MutexLock lock(&mu_);
  if (priority == Priority::kDemand) ++demand_pacing_;
  bool waited = false;
  while (limits_.bytes_per_s > 0) {
    RefillLocked(clock_->Now());
    const double burst = BurstLocked();
    // Demand runs the budget up to one burst into debt; warm-up waits for a
    // positive budget (a read larger than a burst for a full one) and for
    // every waiting demand read.
    const double need = priority == Priority::kDemand ? -burst : std::min(double(bytes), burst);
    if (tokens_ >= need && (priority == Priority::kDemand || demand_pacing_ == 0)) break;
    waited = true;
    const double seconds = std::max(need - tokens_, 1.0) / limits_.bytes_per_s;
    const auto wait = std::chrono::duration<double>(std::min(seconds, 0.1));
    clock_->WaitFor(&cv_, &mu_, std::chrono::duration_cast<std::chrono::nanoseconds>(wait));
  }
  if (priority == Priority::kDemand) {
    --demand_pacing_;
  } else if (waited) {
    ++warm_waits_;
  }
  if (limits_.bytes_per_s > 0) tokens_ -= double(bytes);
  lock.Unlock();
  if (priority == Priority::kDemand) cv_.NotifyAll();
}

OriginGate::Limits NodeShareOfOriginLimits(const proto::ClusterMap& map, std::string_view self, int node_max) {
  double total = 0, mine = 0;
  int up = 0;
  for (const proto::NodeInfo& n : map.nodes) {
    // A node down but held keeps its placement weight, not its share of the
    // origin: it reads nothing meanwhile, and the others read its chunks
    // through for it.
    const double w = n.up ? proto::PlacementWeight(n) : 0;
    total += w;
    up += n.up ? 1 : 0;
    if (n.name == self) mine = w;
  }
  const double share = mine > 0 && total > 0 ? mine / total : 1.0 / std::max(1, up);
  OriginGate::Limits out;
  out.connections = node_max;
  if (map.origin_limits.max_connections > 0) {
    const int c = std::max(1, static_cast<int>(double(map.origin_limits.max_connections) * share));
    out.connections = node_max > 0 ? std::min(node_max, c) : c;
  }
  out.bytes_per_s = double(map.origin_limits.max_bytes_per_s) * share;
  return out;
}

}  // namespace hoard
