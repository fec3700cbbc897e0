// File: common/single_flight.h
//
// SingleFlight runs at most one computation per key at a time: the first
// caller for a key (the leader) runs `fn`; callers that arrive while it runs
// wait and receive the leader's result. Nothing is remembered afterwards, so
// a failure is not cached and the next caller tries again.
//
//   SingleFlight<ChunkKey, Result<Bytes>, ChunkKeyHash> flights;
//   Result<Bytes> r = flights.Do(key, [&] { return FetchFromOrigin(key); });
//
// Used wherever many readers may miss the same chunk at once (a training epoch
// with several loader workers): the origin or the peer sees one request.
//
// If `fn` throws, the leader and every waiting caller get the exception, and
// the key is free again (no caller is left waiting for a flight that ended).
//
// Thread-safety: Do may be called from any thread. `fn` runs on the leader's
// thread without any SingleFlight lock held.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <unordered_map>

#include "common/mutex.h"

namespace hoard {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
 public:
  // Returns fn()'s result, or the result of the call already running for
  // `key`. `leader`, if given, says which of the two happened.
  template <typename Fn>
  Value Do(const Key& key, Fn&& fn, bool* leader = nullptr) {
    std::shared_ptr<Flight> flight;
    bool lead = false;
    {
      MutexLock lock(&mu_);
      auto [it, inserted] = flights_.try_emplace(key);
      if (inserted) {
        it->second = std::make_shared<Flight>();
      } else {
        ++it->second->followers;
      }
      flight = it->second;
      lead = inserted;
    }
    if (leader != nullptr) *leader = lead;
    if (!lead) {
      MutexLock lock(&flight->mu);
      while (!flight->done) flight->cv.Wait(&flight->mu);
      if (flight->error) std::rethrow_exception(flight->error);
      return *flight->value;
    }
    std::optional<Value> v;
    std::exception_ptr error;
    try {
      v.emplace(fn());
    } catch (...) {
      error = std::current_exception();
    }
    {
      MutexLock lock(&flight->mu);
      flight->value = v;
      flight->error = error;
      flight->done = true;
    }
    flight->cv.NotifyAll();
    {
      MutexLock lock(&mu_);
      flights_.erase(key);
    }
    if (error) std::rethrow_exception(error);
    return std::move(*v);
  }

  // Callers waiting for the run of `key` in flight now (0 if none): for tests
  // whose leader must not finish before the others have joined it.
  int Followers(const Key& key) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = flights_.find(key);
    return it == flights_.end() ? 0 : it->second->followers;
  }

 private:
  struct Flight {
    Mutex mu;
    CondVar cv;
    bool done GUARDED_BY(mu) = false;  // set once by the leader
    std::optional<Value> value GUARDED_BY(mu);
    std::exception_ptr error GUARDED_BY(mu);
    int followers = 0;  // under SingleFlight::mu_ (which GUARDED_BY cannot name from here)
  };

  Mutex mu_;
  std::unordered_map<Key, std::shared_ptr<Flight>, Hash> flights_ GUARDED_BY(mu_);
};

}  // namespace hoard
