// File: common/peer_health.h
//
// PeerHealth says which peers a reader should skip for now, so that a peer
// that does not answer costs one wait, not one per request. A peer is
// suspect:
//   1. for `suspect_for` after a request to it got no answer at all: it could
//      not be reached, its connection dropped, or the call timed out (a dead
//      node costs one connect timeout until the coordinator marks it down);
//   2. for `suspect_for` once `slow_after` requests to it in a row were
//      overdue: still unanswered when their hedge delay passed
//      (common/latency_window.h), so each was also asked of another source.
//      A process that is stopped (SIGSTOP, a swap storm, a stuck disk) keeps
//      its TCP connections: the kernel answers for it, so (1) never fires and
//      only slowness tells;
//   3. while a request to it is overdue and still in flight, and it is
//      stalled: it has answered nothing for `quiet` (the caller's choice: the
//      longest hedge delay), counted from its last answer or from the first
//      request to it after that (Asked), whichever came later: a peer that
//      was not asked for a while, restarted, or never answered yet is given
//      `quiet` from its first request. A peer that is stuck would leave the
//      next request waiting behind the first, so none should start there;
//      one that keeps answering others is busy, not stuck (most likely
//      reading through from the origin, or a node that just joined filling
//      its share from its peers), and taking its requests elsewhere would
//      only move them to the origin too.
// Check says which: kSuspect (rule 1; or rule 2 or 3 while the peer is
// stalled): skip it. kSlow (rule 2 while it still answers): skip it for
// another owner, but ask it rather than the origin, for the reason above.
// A suspicion from (1) or (2) ends when it expires, or at once when the
// cluster map changes (a newer map that still lists the peer up: it may have
// restarted), so a node that comes back is not bypassed for the rest of it.
// The next request then goes to the peer again: an answer within its hedge
// delay clears its count of slow requests (it recovered), while one more
// overdue request makes it suspect again at once.
//
// Callers report every request's start (Asked), its end (Finished) and,
// when its hedge delay passes first, that it is overdue (Overdue), before its
// end.
//
// Thread-safety: all methods may be called from any thread (one mutex, never
// held while calling out).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"

namespace hoard {

class PeerHealth {
 public:
  struct Options {
    // How long a suspicion lasts (unless the map changes first).
    std::chrono::milliseconds suspect_for{5000};
    // Overdue requests in a row that make a peer suspect. One is not enough:
    // a peer that paused once (a compaction, a burst of other readers) must
    // not lose its share of the reads for `suspect_for`; the overdue request
    // itself was hedged, and rule 3 skips the peer while it is stuck.
    int slow_after = 3;
  };

  enum class Standing {
    kGood,     // ask it
    kSlow,     // rule 2, but it answers others: ask another owner first, not the origin
    kSuspect,  // skip it
  };

  // `clock` outlives this object.
  PeerHealth(Options options, const Clock* clock);

  // What to make of `peer` now. `map_epoch`: of the map the caller acts on;
  // `quiet`: how long without an answer makes it stalled (rule 3).
  Standing Check(const std::string& peer, uint64_t map_epoch, std::chrono::nanoseconds quiet);

  // Whether `peer` has answered nothing for `quiet`: since its last answer,
  // or since the first request to it after that (a peer never asked is
  // stalled: nothing says it is there). If not, `until` (when given) is when
  // it would be, if nothing else comes.
  bool Stalled(const std::string& peer, std::chrono::nanoseconds quiet,
               std::chrono::steady_clock::time_point* until = nullptr);

  // A request to `peer` is being sent: the first since its last answer (or
  // ever) starts its silence.
  void Asked(const std::string& peer);

  // A request to `peer`, made under map `map_epoch`, passed its hedge delay
  // unanswered. Returns true when this made the peer suspect for slowness
  // (rule 2) and it was not already.
  bool Overdue(const std::string& peer, uint64_t map_epoch);

  // A request to `peer` ended. `answered`: the peer replied (an error reply
  // counts: it is there); else it could not be reached or never replied
  // (rule 1). `timely`: it replied within its hedge delay. `overdue`:
  // Overdue was called for this request.
  void Finished(const std::string& peer, uint64_t map_epoch, bool answered, bool timely, bool overdue);

  // Times a peer became suspect for slowness (rule 2), for metrics.
  uint64_t slow_suspicions() const;

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Peer {
    bool suspect = false;  // rule 1 or 2, until `until` or another map epoch
    bool for_slowness = false;
    TimePoint until;
    uint64_t map_epoch = 0;
    int slow_in_a_row = 0;      // overdue requests since the last timely answer
    int overdue_in_flight = 0;  // rule 3
  };
  // Whether p's suspicion (rule 1 or 2) still holds; ends it if not.
  bool SuspectLocked(Peer& p, uint64_t map_epoch, TimePoint now) REQUIRES(mu_);
  bool StalledLocked(const std::string& peer, std::chrono::nanoseconds quiet, TimePoint now, TimePoint* until)
      REQUIRES(mu_);
  void SuspectLocked(Peer& p, uint64_t map_epoch, TimePoint now, bool for_slowness) REQUIRES(mu_);
  // Forgets `it` once it holds nothing worth remembering.
  void ForgetIfClean(std::unordered_map<std::string, Peer>::iterator it) REQUIRES(mu_);

  const Options options_;
  const Clock* clock_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Peer> peers_ GUARDED_BY(mu_);  // only peers with some state
  // Since when a peer has been silent: its last answer, or the first request
  // to it after that (or ever), whichever came later. An answer from long ago
  // (before the peer restarted, or before a lull in the reads) is no sign of
  // a stall: only a request it leaves unanswered is.
  struct Silence {
    TimePoint since;
    bool asked = false;  // a request was sent since `since`
  };
  std::unordered_map<std::string, Silence> silence_ GUARDED_BY(mu_);  // one entry per peer ever asked
  uint64_t slow_suspicions_ GUARDED_BY(mu_) = 0;
};

}  // namespace hoard
