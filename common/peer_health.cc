#include "common/peer_health.h"

namespace hoard {

PeerHealth::PeerHealth(Options options, const Clock* clock) : options_(options), clock_(clock) {}

bool PeerHealth::SuspectLocked(Peer& p, uint64_t map_epoch, TimePoint now) {
  if (!p.suspect) return false;
  // A newer map that still lists the peer up (it re-registered after a
  // restart) is worth one more try.
  if (now < p.until && map_epoch == p.map_epoch) return true;
  p.suspect = false;
  p.for_slowness = false;
  return false;
}

void PeerHealth::SuspectLocked(Peer& p, uint64_t map_epoch, TimePoint now, bool for_slowness) {
  p.suspect = true;
  p.for_slowness = for_slowness;
  p.until = now + options_.suspect_for;
  p.map_epoch = map_epoch;
}

void PeerHealth::ForgetIfClean(std::unordered_map<std::string, Peer>::iterator it) {
  const Peer& p = it->second;
  if (!p.suspect && p.slow_in_a_row == 0 && p.overdue_in_flight == 0) peers_.erase(it);
}

bool PeerHealth::StalledLocked(const std::string& peer, std::chrono::nanoseconds quiet, TimePoint now,
                               TimePoint* until) {
  auto it = silence_.find(peer);
  if (it == silence_.end() || now - it->second.since >= quiet) return true;
  if (until != nullptr) *until = it->second.since + quiet;
  return false;
}

bool PeerHealth::Stalled(const std::string& peer, std::chrono::nanoseconds quiet, TimePoint* until) {
  const TimePoint now = clock_->Now();
  MutexLock lock(&mu_);
  return StalledLocked(peer, quiet, now, until);
}

PeerHealth::Standing PeerHealth::Check(const std::string& peer, uint64_t map_epoch,
                                       std::chrono::nanoseconds quiet) {
  const TimePoint now = clock_->Now();
  MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return Standing::kGood;
  Peer& p = it->second;
  const bool stalled = StalledLocked(peer, quiet, now, nullptr);
  if (p.overdue_in_flight > 0 && stalled) return Standing::kSuspect;
  if (!SuspectLocked(p, map_epoch, now)) {
    ForgetIfClean(it);
    return Standing::kGood;
  }
  return p.for_slowness && !stalled ? Standing::kSlow : Standing::kSuspect;
}

void PeerHealth::Asked(const std::string& peer) {
  const TimePoint now = clock_->Now();
  MutexLock lock(&mu_);
  auto [it, inserted] = silence_.try_emplace(peer, Silence{.since = now, .asked = true});
  if (!inserted && !it->second.asked) it->second = {.since = now, .asked = true};
}

bool PeerHealth::Overdue(const std::string& peer, uint64_t map_epoch) {
  const TimePoint now = clock_->Now();
  MutexLock lock(&mu_);
  Peer& p = peers_[peer];
  ++p.overdue_in_flight;
  ++p.slow_in_a_row;
  if (p.slow_in_a_row < options_.slow_after) return false;
  // Already suspect for slowness under this map: the suspicion stands as it
  // is (it is not extended by the requests that were in flight when it began).
  if (SuspectLocked(p, map_epoch, now) && p.for_slowness) return false;
  SuspectLocked(p, map_epoch, now, /*for_slowness=*/true);
  ++slow_suspicions_;
  return true;
}

void PeerHealth::Finished(const std::string& peer, uint64_t map_epoch, bool answered, bool timely, bool overdue) {
  const TimePoint now = clock_->Now();
  MutexLock lock(&mu_);
  if (answered) silence_[peer] = {.since = now, .asked = false};
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    if (answered && !overdue) return;  // nothing to clear
    it = peers_.emplace(peer, Peer{}).first;
  }
  Peer& p = it->second;
  if (overdue && p.overdue_in_flight > 0) --p.overdue_in_flight;
  if (!answered) {
    SuspectLocked(p, map_epoch, now, /*for_slowness=*/false);
  } else if (timely) {
    p.slow_in_a_row = 0;
  }
  ForgetIfClean(it);
}

uint64_t PeerHealth::slow_suspicions() const {
  MutexLock lock(&mu_);
  return slow_suspicions_;
}

}  // namespace hoard
