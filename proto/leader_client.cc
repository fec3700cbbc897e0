#include "proto/leader_client.h"

#include "common/units.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "proto/message_types.h"

namespace hoard::proto {

std::vector<std::string> SplitEndpoints(std::string_view list) { return SplitCommaList(list); }

LeaderClient::LeaderClient(zmq::context_t& context, std::string_view endpoints, Options options,
                           std::shared_ptr<LeaderHint> hint)
    : context_(context),
      options_(options),
      // An empty list stays one (empty) endpoint, which fails as RpcClient's does.
      endpoints_([&] {
        std::vector<std::string> v = SplitEndpoints(endpoints);
        if (v.empty()) v.emplace_back(endpoints);
        return v;
      }()),
      hint_(hint ? std::move(hint) : std::make_shared<LeaderHint>()) {
  answered_by_ = hint_->Get();
  if (answered_by_.empty()) answered_by_ = endpoints_.front();
  // Connect now, as an RpcClient does when it is made: the connection comes
  // up while the caller prepares its first request.
  ClientFor(answered_by_);
}

void LeaderClient::set_connect_timeout(std::chrono::milliseconds t) { connect_timeout_ = t; }

RpcClient& LeaderClient::ClientFor(const std::string& endpoint) {
  std::unique_ptr<RpcClient>& client = clients_[endpoint];
  if (!client) client = std::make_unique<RpcClient>(context_, endpoint);
  return *client;
}

bool LeaderClient::Several(const std::string& named) const {
  return endpoints_.size() > 1 || !named.empty();
}

const std::string& LeaderClient::Next(const std::string& endpoint) const {
  auto it = std::find(endpoints_.begin(), endpoints_.end(), endpoint);
  if (it == endpoints_.end() || ++it == endpoints_.end()) return endpoints_.front();
  return *it;
}

Status LeaderClient::Run(uint16_t type, bool resendable, std::chrono::milliseconds timeout,
                         const Attempt& attempt) {
  Clock* clock = options_.clock;
  Time deadline{};  // set when the first attempt ends
  std::string target = hint_->Get();
  if (target.empty()) target = answered_by_;
  // `named`: set once a standby answered (and to the leader it named, or
  // to itself when it named none): from then on several coordinators are
  // known, even with a list of one.
  std::string named = std::find(endpoints_.begin(), endpoints_.end(), target) == endpoints_.end() ? target : "";
  std::vector<std::string> asked;  // in order, for the final error
  std::set<std::string> round;     // asked since the last backoff
  Status last;
  bool standby_answered = false;  // some coordinator said it does not lead
  for (bool first = true;; first = false) {
    std::chrono::milliseconds t = timeout;
    if (!first) {
      if (round.count(target) > 0) {
        // Every coordinator known had its turn: none leads yet. Pause
        // rather than spin through them.
        if (clock->Now() + options_.backoff >= deadline) break;
        clock->SleepFor(options_.backoff);
        round.clear();
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock->Now());
      if (left.count() <= 0) break;
      t = std::min(timeout, left);
    }
    round.insert(target);
    if (std::find(asked.begin(), asked.end(), target) == asked.end()) asked.push_back(target);
    RpcClient& client = ClientFor(target);
    client.set_connect_timeout(Several(named) ? std::min(connect_timeout_, options_.connect_timeout)
                                              : connect_timeout_);
    last = attempt(client, t, /*again=*/!first);
    if (first) deadline = clock->Now() + options_.failover_wait;
    answered_ = client.last_call_answered();
    busy_ = client.last_call_busy();
    timed_out_ = client.last_call_timed_out();
    if (answered_) answered_by_ = target;
    if (last.code() == Code::kNotLeader) {
      standby_answered = true;
      hint_->Forget(target);
      const std::string& leader = last.message();
      if (named.empty()) named = target;
      if (!leader.empty() && leader != target) {
        // Trusted, even outside the list: it came over the authenticated
        // connection, from a coordinator.
        named = leader;
        target = leader;
      } else {
        target = Next(target);
      }
      continue;
    }
    if (answered_) {
      // The leader's answer (or a lone coordinator's), whatever it says.
      hint_->Set(target);
      // Clients of leaders named in the past and gone since are closed, so
      // that years of takeovers do not pile up sockets.
      for (auto it = clients_.begin(); it != clients_.end();) {
        const bool listed = std::find(endpoints_.begin(), endpoints_.end(), it->first) != endpoints_.end();
        it = listed || it->first == target ? std::next(it) : clients_.erase(it);
      }
      return last;
    }
    if (!Several(named)) return last;  // one coordinator: exactly RpcClient
    // Sent and unanswered: it may have been applied. Only a request that
    // means the same twice, or whose resend its handler recognises, may go
    // to the next coordinator.
    if (client.last_call_sent() && !IsIdempotent(type) && !resendable) return last;
    hint_->Forget(target);
    target = Next(target);
  }
  std::string names;
  for (const std::string& e : asked) names += (names.empty() ? "" : ", ") + e;
  // Coordinators answered that none of them leads: that is the outcome, even
  // when the last attempt, cut short by the deadline, only timed out.
  const Code code = standby_answered ? Code::kNotLeader : last.code();
  return Status(code, "no coordinator led within " + std::to_string(options_.failover_wait.count()) +
                          " ms (asked " + names + "); last: " + last.ToString());
}

LeaderPool::LeaderPool(zmq::context_t& context, std::string endpoints, LeaderClient::Options options,
                       std::chrono::milliseconds connect_timeout, size_t max_idle)
    : context_(context),
      endpoints_(std::move(endpoints)),
      options_(options),
      connect_timeout_(connect_timeout),
      max_idle_(max_idle) {}

LeaderPool::Lease LeaderPool::Acquire() {
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<LeaderClient> client = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(client));
    }
  }
  auto client = std::make_unique<LeaderClient>(context_, endpoints_, options_, hint_);
  client->set_connect_timeout(connect_timeout_);
  return Lease(this, std::move(client));
}

void LeaderPool::Release(std::unique_ptr<LeaderClient> client) {
  MutexLock lock(&mu_);
  if (idle_.size() < max_idle_) {
    idle_.push_back(std::move(client));
    return;
  }
  lock.Unlock();  // closes its sockets outside the lock
}

size_t LeaderPool::idle() const {
  MutexLock lock(&mu_);
  return idle_.size();
}

}  // namespace hoard::proto
