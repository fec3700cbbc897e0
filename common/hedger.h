// File: common/hedger.h
//
// Hedger asks one request of a list of sources in order (a chunk's owners,
// then the origin) and does not let a slow source hold the caller:
//   - each source asked has its hedge delay (LatencyWindow::HedgeDelay when
//     it is asked: a multiple of the recent p99, between a floor and a cap)
//     to answer. Once no request in flight is within its delay (each is
//     overdue), the next source is asked too, while the others stay in
//     flight: a hedged request;
//   - a source that fails, or whose answer fails `verify`, hands over to the
//     next at once, as a plain fallback would;
//   - the first answer that passes `verify` wins and is returned; every other
//     answer, before or after it, is dropped;
//   - with no source left, the call waits for those in flight and returns the
//     last failure; or, with `give_up_when_overdue`, returns kUnavailable as
//     soon as they are all overdue (read-ahead: the demand read that follows
//     asks again, and by then skips the peers that are overdue).
//
// Stalled, or only busy: a peer is stalled when it has answered none of this
// Hedger's requests for the longest hedge delay (LatencyWindow's cap),
// counted from its last answer or, for a peer that has not answered yet,
// from the first request to it. The origin is hedged to only past stalled
// peers; only a stalled peer is skipped for its overdue request (PeerHealth
// rule 3); and a peer suspect for slowness that still answers (rule 2,
// PeerHealth::Standing::kSlow) is passed over for another owner but not for
// the origin. A peer that keeps answering other requests is busy, not stuck,
// most likely reading through from the origin itself (a first pass, an NFS
// server under load) or, just joined, filling its share from its peers: a
// read of the chunk from the origin, outside the cluster's origin limits
// (origin/origin_gate.h), would only add to that load, so it is waited
// for, or hedged to another owner. A stopped process answers nothing: a
// request sent to it once it stopped waits its hedge delay, or at most the
// cap after the process's last answer, before the origin is asked too.
//
// Peers: a source names the peer it asks ("" for one that is not a peer: the
// origin). Run skips a peer that PeerHealth calls suspect (above), and tells
// it of every request's start and end and every overdue request, so a peer
// that keeps leaving requests overdue is skipped like a dead one
// (common/peer_health.h).
// Answers from peers that pass `verify` are the LatencyWindow's samples,
// losers' included (a late answer is a true latency).
//
// Lifetimes, which give this class its shape: requests run on the Hedger's
// TaskPool, never on the caller's thread, so the caller can return while the
// losers are still in flight. Each request owns what it sends and receives
// (its closure's captures, its own reply buffer), and the call's shared state
// (the results, which request won, `verify`) lives until the last request of
// the call ends, held by each request as much as by the caller. A reply that
// lands after the call returned is handed to that state and freed with it on
// the request's thread: nothing it touches is freed or reused under it, and
// the winner's bytes are never shared with a loser. Sources may therefore
// capture only values and what outlives the Hedger, whose destructor waits
// for every request in flight (up to the sources' own timeouts).
//
//   std::vector<Hedger::Source<Bytes>> sources = {
//       {.peer = "tcp://node2:7101", .map_epoch = 7, .fetch = [=] { return AskPeer(2); }},
//       {.fetch = [=] { return ReadOrigin(); }}};
//   Hedger::Outcome<Bytes> got = hedger.Run(std::move(sources), CheckLength, {});
//
// Waiting is in real time (a condition variable on the steady clock); the
// Clock given is for the rest, which tests move by hand: the ages of the
// LatencyWindow's samples, how long PeerHealth's suspicions last, and when
// each peer last answered (whether it is stalled).
//
// Thread-safety: Run may be called from any thread, concurrently.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/latency_window.h"
#include "common/mutex.h"
#include "common/peer_health.h"
#include "common/result.h"
#include "common/task_pool.h"

namespace hoard {

class Hedger {
 public:
  struct Options {
    LatencyWindow::Options latency;
    PeerHealth::Options health;
    TaskPool::Options pool;
    const Clock* clock = Clock::Real();  // outlives the Hedger
    // Suspicion state shared with another asker of the same peers (the
    // mount's PeerChunkClient: cluster/peer_chunk_client.h), on the same
    // clock; null = the Hedger keeps its own, from `health`. Outlives it.
    PeerHealth* shared_health = nullptr;
    // Called (from a caller of Run, with no lock held) when a peer becomes
    // suspect for slowness; may be empty.
    std::function<void(const std::string& peer)> on_slow_suspect;
  };

  template <typename T>
  struct Source {
    std::string peer;        // PeerHealth's key (an endpoint); "" = not a peer
    uint64_t map_epoch = 0;  // of the map the peer was picked from
    std::function<Result<T>()> fetch;
    // Ask it beside requests in flight only once their peers are stalled
    // (above). For the origin: a peer that is busy, not stuck, is likely
    // reading the chunk from the origin already.
    bool only_past_stalled_peers = false;
  };

  template <typename T>
  struct Outcome {
    Result<T> value = Status::Unavailable("no source to ask");
    int winner = -1;     // index of the source whose answer won
    bool hedged = false;  // the winner was asked while another request was in flight
    // Per source: its failure, if it failed (or failed `verify`) before Run
    // returned; OK for one that won, was skipped, not asked, or still runs.
    std::vector<Status> failures;
  };

  struct RunOptions {
    // Return kUnavailable once every source was asked and every request in
    // flight is overdue, instead of waiting for them.
    bool give_up_when_overdue = false;
  };

  explicit Hedger(Options options);
  Hedger(const Hedger&) = delete;
  Hedger& operator=(const Hedger&) = delete;

  // Asks `sources` as described above. `verify` runs on the requests'
  // threads: an answer it refuses counts as that source's failure.
  template <typename T>
  Outcome<T> Run(std::vector<Source<T>> sources, std::function<Status(const T&)> verify, RunOptions run);

  // Whether Run would skip `peer` now for another owner (it may still ask
  // a peer suspect only for slowness rather than the origin).
  bool Suspect(const std::string& peer, uint64_t map_epoch) {
    return health_.Check(peer, map_epoch, Quiet()) != PeerHealth::Standing::kGood;
  }

  // The delay a request asked now would get.
  std::chrono::nanoseconds HedgeDelay() const { return window_.HedgeDelay(); }

  // Requests asked while another of the same call was in flight; of those,
  // the ones whose answer won; calls that gave up (give_up_when_overdue);
  // times a peer became suspect for slowness.
  uint64_t hedges() const { return hedges_.load(std::memory_order_relaxed); }
  uint64_t hedges_won() const { return hedges_won_.load(std::memory_order_relaxed); }
  uint64_t gave_up() const { return gave_up_.load(std::memory_order_relaxed); }
  // Requests that passed their hedge delay unanswered.
  uint64_t overdue() const { return overdue_.load(std::memory_order_relaxed); }
  uint64_t slow_suspicions() const { return health_.slow_suspicions(); }

  const LatencyWindow& latency() const { return window_; }

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;  // waits: always the real clock
  using ClockTime = std::chrono::steady_clock::time_point;   // clock_->Now()'s (a FakeClock in tests)

  template <typename T>
  struct Request {
    size_t source = 0;
    std::string peer;  // the source's
    uint64_t map_epoch = 0;
    SteadyTime started;
    std::chrono::nanoseconds delay{0};
    bool hedge = false;
    bool overdue = false;  // guarded by Call::mu
    bool ended = false;    // guarded by Call::mu
    std::optional<Result<T>> result;  // guarded by Call::mu; set at the end unless the call returned
  };
  // One Run's state, shared by the caller and its requests.
  template <typename T>
  struct Call {
    Mutex mu;
    CondVar cv;  // a request ended
    std::function<Status(const T&)> verify;
    std::vector<Request<T>> requests GUARDED_BY(mu);  // reserved up front, so never moved
    std::deque<size_t> ended GUARDED_BY(mu);          // requests that ended, not yet looked at
    bool returned GUARDED_BY(mu) = false;             // the caller has its answer
  };

  // How long a peer must have answered nothing to be stalled: the longest
  // hedge delay. A peer that is there answers something within it, even
  // one reading every chunk through from a loaded origin.
  std::chrono::nanoseconds Quiet() const {
    return std::max<std::chrono::nanoseconds>(window_.options().floor, window_.options().cap);
  }
  // Whether every request in flight of `call` has a peer that is stalled
  // (above); if not, `recheck` is when the first of them would be (the
  // Clock's time).
  template <typename T>
  bool PeersStalled(const Call<T>& call, ClockTime* recheck) REQUIRES(call.mu);

  const Clock* clock_;
  LatencyWindow window_;
  PeerHealth own_health_;  // used unless Options::shared_health is given
  PeerHealth& health_;  // its lock comes after Call::mu (a lock of another class: ACQUIRED_AFTER cannot name it)
  const std::function<void(const std::string&)> on_slow_suspect_;
  std::atomic<uint64_t> overdue_{0};
  std::atomic<uint64_t> hedges_{0};
  std::atomic<uint64_t> hedges_won_{0};
  std::atomic<uint64_t> gave_up_{0};
  // Last: destroyed first, so it waits for requests that still use the
  // members above.
  TaskPool pool_;
};

template <typename T>
Hedger::Outcome<T> Hedger::Run(std::vector<Source<T>> sources, std::function<Status(const T&)> verify,
                               RunOptions run) {
  Outcome<T> out;
  out.failures.assign(sources.size(), Status::Ok());
  auto call = std::make_shared<Call<T>>();
  call->verify = std::move(verify);
  size_t next = 0;       // the next source to consider
  size_t in_flight = 0;  // requests asked and not ended (as the caller has seen)
  Status last = Status::Unavailable("no source to ask: every peer is suspect");

  auto standing = [&](size_t s) {
    const Source<T>& src = sources[s];
    return src.peer.empty() ? PeerHealth::Standing::kGood : health_.Check(src.peer, src.map_epoch, Quiet());
  };
  // The next source that is not a suspect peer (sources.size() if none is
  // left); the suspect ones before it are passed over for good. A peer that
  // is only slow is passed over only for a later peer in good standing, not
  // for the origin (above). Called with call->mu held (PeerHealth's lock
  // comes after it).
  auto next_candidate = [&]() -> size_t {
    for (; next < sources.size(); ++next) {
      const PeerHealth::Standing st = standing(next);
      if (st == PeerHealth::Standing::kGood) return next;
      if (st == PeerHealth::Standing::kSuspect) continue;
      bool good_peer_later = false;
      for (size_t later = next + 1; later < sources.size() && !good_peer_later; ++later) {
        good_peer_later = !sources[later].peer.empty() && standing(later) == PeerHealth::Standing::kGood;
      }
      if (!good_peer_later) return next;
    }
    return next;
  };
  // Asks source `s` (the candidate), with call->mu held.
  auto ask = [&](size_t s) {
    call->mu.AssertHeld();
    next = s + 1;
    Source<T>& src = sources[s];
    const size_t r = call->requests.size();
    Request<T>& req = call->requests.emplace_back();
    req.source = s;
    req.peer = src.peer;
    req.map_epoch = src.map_epoch;
    req.started = std::chrono::steady_clock::now();
    req.delay = window_.HedgeDelay();
    req.hedge = in_flight > 0;
    if (req.hedge) hedges_.fetch_add(1, std::memory_order_relaxed);
    if (!src.peer.empty()) health_.Asked(src.peer);
    ++in_flight;
    pool_.Run([this, call, r, started = req.started, delay = req.delay, peer = src.peer, epoch = src.map_epoch,
               fetch = std::move(src.fetch)] {
      // An exception (a socket that cannot be made, no memory) fails this
      // source, as a failed answer would: it must not end the process from a
      // thread nobody waits on.
      Result<T> got = Status::Internal("no answer");
      try {
        got = fetch();
        if (got.ok()) {
          if (Status v = call->verify(*got); !v.ok()) got = v;
        }
      } catch (const std::exception& e) {
        got = Status::Internal(std::string("request failed: ") + e.what());
      } catch (...) {
        got = Status::Internal("request failed: unknown exception");
      }
      const auto took = std::chrono::steady_clock::now() - started;
      const bool ok = got.ok();
      // No answer at all is kUnavailable (callers' sources say so); an
      // error the peer replied with is an answer.
      const bool answered = ok || got.status().code() != Code::kUnavailable;
      bool overdue = false;
      {
        MutexLock lock(&call->mu);
        Request<T>& me = call->requests[r];
        me.ended = true;
        overdue = me.overdue;
        if (!call->returned) {
          me.result.emplace(std::move(got));
          call->ended.push_back(r);
        }
      }
      call->cv.NotifyAll();
      if (!peer.empty()) {
        health_.Finished(peer, epoch, answered, answered && took <= delay, overdue);
        if (ok) window_.Record(took);
      }
      // A loser's answer (left in `got` when the call had returned) is
      // freed here, on this thread, with nothing else referring to it.
    });
  };
  MutexLock lock(&call->mu);
  call->requests.reserve(sources.size());
  if (size_t s = next_candidate(); s < sources.size()) ask(s);
  for (;;) {
    while (!call->ended.empty()) {
      Request<T>& req = call->requests[call->ended.front()];
      call->ended.pop_front();
      --in_flight;
      if (req.result->ok()) {
        call->returned = true;
        out.value = std::move(*req.result);
        out.winner = static_cast<int>(req.source);
        out.hedged = req.hedge;
        if (req.hedge) hedges_won_.fetch_add(1, std::memory_order_relaxed);
        return out;
      }
      last = req.result->status();
      out.failures[req.source] = last;
      req.result.reset();
    }
    // The earliest deadline among requests in flight still within their delay.
    std::optional<SteadyTime> deadline;
    for (const Request<T>& req : call->requests) {
      if (req.ended || req.overdue) continue;
      const SteadyTime d = req.started + req.delay;
      if (!deadline || d < *deadline) deadline = d;
    }
    if (!deadline) {
      // Nobody in flight is expected to answer in time: ask the next source,
      // unless it waits for stalled peers and one in flight is only busy.
      if (const size_t s = next_candidate(); s < sources.size()) {
        ClockTime recheck;
        if (in_flight == 0 || !sources[s].only_past_stalled_peers || PeersStalled(*call, &recheck)) {
          ask(s);
          continue;
        }
        const auto wait = std::max<std::chrono::nanoseconds>(recheck - clock_->Now(), std::chrono::milliseconds(1));
        call->cv.WaitFor(&call->mu, wait, [&] {
          call->mu.AssertHeld();
          return !call->ended.empty();
        });
        continue;
      }
      if (in_flight == 0) {
        call->returned = true;
        out.value = last;
        return out;
      }
      if (run.give_up_when_overdue) {
        call->returned = true;
        gave_up_.fetch_add(1, std::memory_order_relaxed);
        out.value = Status::Unavailable("no answer within the hedge delay (" + std::to_string(in_flight) +
                                        " request(s) still in flight)");
        return out;
      }
      while (call->ended.empty()) call->cv.Wait(&call->mu);
      continue;
    }
    if (call->cv.WaitUntil(&call->mu, *deadline, [&] {
          call->mu.AssertHeld();
          return !call->ended.empty();
        })) {
      continue;
    }
    const SteadyTime now = std::chrono::steady_clock::now();
    std::vector<std::string> slow;  // peers that became suspect
    for (Request<T>& req : call->requests) {
      if (req.ended || req.overdue || req.started + req.delay > now) continue;
      req.overdue = true;
      overdue_.fetch_add(1, std::memory_order_relaxed);
      // Under call->mu, so PeerHealth hears of it before the request's end
      // (which the request reports after reading `overdue` under call->mu).
      if (!req.peer.empty() && health_.Overdue(req.peer, req.map_epoch)) slow.push_back(req.peer);
    }
    if (!slow.empty() && on_slow_suspect_) {
      lock.Unlock();
      for (const std::string& peer : slow) on_slow_suspect_(peer);
      lock.Lock();
    }
  }
}

template <typename T>
bool Hedger::PeersStalled(const Call<T>& call, ClockTime* recheck) {
  bool all = true;
  for (const Request<T>& req : call.requests) {
    if (req.ended || req.peer.empty()) continue;
    ClockTime until;
    if (health_.Stalled(req.peer, Quiet(), &until)) continue;
    if (all || until < *recheck) *recheck = until;
    all = false;
  }
  return all;
}

}  // namespace hoard
