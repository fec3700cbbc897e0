// File: proto/leader_client.h
//
// LeaderClient is the coordinator client every program uses instead of a bare
// RpcClient: it takes the list of coordinators ("tcp://a:7100,tcp://b:7100")
// and follows whichever leads (issue 32: one coordinator leads, the others
// are standbys that answer every request kNotLeader naming the leader,
// coordinator/service.h).
//
//   LeaderClient coordinator(zmq, "tcp://a:7100,tcp://b:7100,tcp://c:7100");
//   Result<proto::ClusterMap> map = coordinator.Call(proto::GetClusterMap{}, 2s);
//
// A call goes to the leader last learned (shared by the clients of one
// LeaderPool), else to the first endpoint of the list, and then:
//   - kNotLeader naming a leader: asks that one at once. It may be outside
//     the list (a coordinator replaced since the list was written): it is
//     trusted, as the answer came over the authenticated connection.
//   - kNotLeader naming none (an election under way): asks the next endpoint.
//   - no answer (a dead or unreachable coordinator): asks the next endpoint,
//     but only if the request certainly was not processed (it never went out:
//     RpcClient::last_call_sent), is idempotent (IsIdempotent,
//     proto/message_types.h) or is Resendable: a request that went out and
//     got no reply may have been applied. Any other such call returns
//     kUnavailable, as RpcClient does.
// A Resendable request (one with `bool retry`: CkptCommit, DatasetAdd, ...,
// proto/message_types.h says which and what its handler does) goes out with
// `retry` set on every attempt after the call's first, so that the leader
// counts finding its own effect (the first attempt applied before its
// coordinator died) as success rather than AlreadyExists or Stale.
//   - any other answer, success or error (a handler's kUnavailable, a busy
//     server too): that is the call's result, and its coordinator the leader.
// Each endpoint is asked once per round; a new round starts after
// Options::backoff. Retrying stops at Options::failover_wait after the first
// attempt ended (a first attempt cut off by the death of its coordinator
// took the caller's whole timeout already): the call then returns the last
// error, its message naming the endpoints asked. The first attempt has the caller's whole timeout (a
// DatasetAdd that walks a large tree is not cut short); later ones at most
// what is left of the failover wait.
//
// A single endpoint that never answers kNotLeader (the embedded coordinator,
// no HA) behaves exactly as an RpcClient: one attempt, no retry, no added
// latency. Failover starts once more than one coordinator is known: several
// in the list, or one named by a standby.
//
// With several endpoints known, each one's connection wait is capped at
// Options::connect_timeout (or set_connect_timeout's, if smaller), so a dead
// coordinator first in the list costs that, not the call's timeout.
//
// Thread-safety: like RpcClient, a LeaderClient belongs to one thread at a
// time. LeaderPool hands them out to concurrent callers and shares what they
// learn of the leader.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/result.h"
#include "proto/rpc_client.h"

namespace hoard::proto {

// A request whose handler resolves a resend (proto/message_types.h): it has
// `bool retry`, set on a call's second and later attempts.
template <typename Req>
concept Resendable = requires(Req r) {
  { r.retry } -> std::same_as<bool&>;
};

// Splits "tcp://a:7100, tcp://b:7100" at commas (spaces around each endpoint
// dropped, empty ones skipped, duplicates kept once, in order).
std::vector<std::string> SplitEndpoints(std::string_view list);

// The leader last learned, shared by the LeaderClients of one LeaderPool so
// that one client's discovery spares the others theirs. Thread-safe.
class LeaderHint {
 public:
  std::string Get() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return leader_;
  }
  void Set(const std::string& leader) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    leader_ = leader;
  }
  // Forgets `leader` if it is still the one remembered (it did not answer).
  void Forget(const std::string& leader) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (leader_ == leader) leader_.clear();
  }

 private:
  mutable Mutex mu_;
  std::string leader_ GUARDED_BY(mu_);  // "" while unknown
};

class LeaderClient {
 public:
  struct Options {
    // How long a call keeps looking for a leader. Longer than a takeover,
    // which takes about the leader's lease TTL plus a moment, so that a call
    // made during one waits it out instead of failing.
    std::chrono::milliseconds failover_wait{15000};
    // The pause before asking the endpoints again, when a round found no
    // leader (an election under way, every coordinator down).
    std::chrono::milliseconds backoff{200};
    // The connection wait per endpoint once several are known (see above).
    std::chrono::milliseconds connect_timeout{1000};
    Clock* clock = Clock::Real();  // the failover wait and the backoff
  };

  // `endpoints`: one endpoint, or several separated by commas. `hint`: shared
  // with other clients (LeaderPool); null for this client's own.
  LeaderClient(zmq::context_t& context, std::string_view endpoints, Options options,
               std::shared_ptr<LeaderHint> hint = nullptr);
  LeaderClient(zmq::context_t& context, std::string_view endpoints)
      : LeaderClient(context, endpoints, Options{}) {}
  LeaderClient(const LeaderClient&) = delete;
  LeaderClient& operator=(const LeaderClient&) = delete;

  // The list it was given.
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // The coordinator that answered the last call (for logs and status); before
  // any answer, the one the next call asks first.
  const std::string& endpoint() const { return answered_by_; }

  // As RpcClient's, for the last attempt of the last call.
  bool last_call_answered() const { return answered_; }
  bool last_call_busy() const { return busy_; }
  bool last_call_timed_out() const { return timed_out_; }

  // As RpcClient::set_connect_timeout, for every endpoint.
  void set_connect_timeout(std::chrono::milliseconds t);

  // As RpcClient::Call, following the leader as described above. `payload`
  // gets the reply payload of the attempt that succeeded.
  template <typename Req>
  Result<typename Req::Reply> Call(const Req& req, std::chrono::milliseconds timeout,
                                   zmq::message_t* payload = nullptr,
                                   const std::string_view* request_payload = nullptr) {
    std::optional<typename Req::Reply> reply;
    Status s = Run(static_cast<uint16_t>(Req::kType), Resendable<Req>, timeout,
                   [&](RpcClient& client, std::chrono::milliseconds t, bool again) -> Status {
                     Result<typename Req::Reply> r = [&] {
                       if constexpr (Resendable<Req>) {
                         if (again) {
                           Req resent = req;
                           resent.retry = true;
                           return client.Call(resent, t, payload, request_payload);
                         }
                       }
                       return client.Call(req, t, payload, request_payload);
                     }();
                     if (!r.ok()) return r.status();
                     reply.emplace(std::move(*r));
                     return Status::Ok();
                   });
    if (!s.ok()) return s;
    return std::move(*reply);
  }

 private:
  // One attempt at `client`; `again`: not the call's first.
  using Attempt = std::function<Status(RpcClient&, std::chrono::milliseconds, bool again)>;
  using Time = std::chrono::steady_clock::time_point;

  // `resendable`: the request type is Resendable.
  Status Run(uint16_t type, bool resendable, std::chrono::milliseconds timeout, const Attempt& attempt);
  // The client for `endpoint`, made on first use.
  RpcClient& ClientFor(const std::string& endpoint);
  // Whether a failed attempt may go on to another coordinator: more than one
  // is known (`named`: an endpoint a standby named this call).
  bool Several(const std::string& named) const;
  // The endpoint after `endpoint` in the list (the first for one not in it).
  const std::string& Next(const std::string& endpoint) const;
  void ApplyConnectTimeout(RpcClient& client) const;

  zmq::context_t& context_;
  const Options options_;
  const std::vector<std::string> endpoints_;
  std::shared_ptr<LeaderHint> hint_;
  std::map<std::string, std::unique_ptr<RpcClient>> clients_;
  std::chrono::milliseconds connect_timeout_{std::chrono::milliseconds::max()};  // set_connect_timeout's
  std::string answered_by_;
  bool answered_ = false;
  bool busy_ = false;
  bool timed_out_ = false;
};

// Keeps idle LeaderClients for concurrent callers, like ClientPool, all
// sharing one LeaderHint: what one learns of the leader, the next asks first.
//
//   auto lease = pool.Acquire();
//   Result<proto::CkptEntryReply> r = lease->Call(commit, 5s);
//
// Thread-safety: Acquire may be called from any thread; a Lease is used by one.
class LeaderPool {
 public:
  LeaderPool(zmq::context_t& context, std::string endpoints, LeaderClient::Options options = {},
             std::chrono::milliseconds connect_timeout = std::chrono::milliseconds::max(), size_t max_idle = 16);

  class Lease {
   public:
    Lease(LeaderPool* pool, std::unique_ptr<LeaderClient> client) : pool_(pool), client_(std::move(client)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (client_) pool_->Release(std::move(client_));
    }
    LeaderClient* operator->() { return client_.get(); }
    LeaderClient& operator*() { return *client_; }

   private:
    LeaderPool* pool_;
    std::unique_ptr<LeaderClient> client_;
  };

  Lease Acquire() EXCLUDES(mu_);
  // The endpoint list; the leader last learned ("" while unknown).
  const std::string& endpoints() const { return endpoints_; }
  std::string leader() const { return hint_->Get(); }
  size_t idle() const EXCLUDES(mu_);

 private:
  void Release(std::unique_ptr<LeaderClient> client) EXCLUDES(mu_);

  zmq::context_t& context_;
  const std::string endpoints_;
  const LeaderClient::Options options_;
  const std::chrono::milliseconds connect_timeout_;
  const size_t max_idle_;
  const std::shared_ptr<LeaderHint> hint_ = std::make_shared<LeaderHint>();
  mutable Mutex mu_;
  std::vector<std::unique_ptr<LeaderClient>> idle_ GUARDED_BY(mu_);  // most recently released last
};

}  // namespace hoard::proto
