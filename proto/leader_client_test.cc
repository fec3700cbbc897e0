// LeaderClient against real RpcServers that play coordinators: standbys answer
// kNotLeader through the server's gate (as coordinator/service.h does), the
// leader serves. Each server counts what reached its gate and its handlers,
// so a test sees which coordinator was asked and that nothing ran twice.
#include "proto/leader_client.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "proto/messages.h"
#include "proto/rpc_server.h"

namespace hoard::proto {
namespace {

using namespace std::chrono_literals;

// Who leads, as every test coordinator sees it: "" for nobody.
class Election {
 public:
  std::string leader() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return leader_;
  }
  void Elect(std::string leader) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    leader_ = std::move(leader);
  }

 private:
  mutable Mutex mu_;
  std::string leader_ GUARDED_BY(mu_);
};

// One coordinator: serves Ping, GetClusterMap, DatasetAdd (its reply's
// source says whether the request was a resend) and DatasetRefresh while it
// leads. `hold`: all but Ping wait until Release (a reply that never comes in
// time: the call times out after it went out).
class FakeCoordinator {
 public:
  FakeCoordinator(zmq::context_t* ctx, Election* election, int n) : election_(election) {
    server_ = std::make_unique<RpcServer>(RpcServer::Options{
        .endpoint = "tcp://127.0.0.1:0", .name = "coordinator", .workers = 2,
        .logger = spdlog::null_logger_mt("leader-test-" + std::to_string(n)), .context = ctx});
    server_->SetGate([this](uint16_t) -> Status {
      asked_.fetch_add(1);
      if (on_asked_) on_asked_();
      std::string leader = election_->leader();
      if (leads_.load() || leader == server_->bound_endpoint()) return Status::Ok();
      return Status::NotLeader(leader);
    });
    server_->Handle<Ping>([this](const Ping&, const Envelope&, std::string*) {
      served_.fetch_add(1);
      return Result<Pong>(Pong{.role = "coordinator", .name = server_->bound_endpoint()});
    });
    server_->Handle<GetClusterMap>([this](const GetClusterMap&, const Envelope&, std::string*) {
      served_.fetch_add(1);
      Hold();
      return Result<ClusterMap>(ClusterMap{.epoch = 7});
    });
    server_->Handle<DatasetAdd>([this](const DatasetAdd& r, const Envelope&, std::string*) {
      served_.fetch_add(1);
      Hold();
      return Result<DatasetAddReply>(DatasetAddReply{.meta = {.name = r.name, .source = r.retry ? "resent" : ""}});
    });
    server_->Handle<DatasetRefresh>([this](const DatasetRefresh& r, const Envelope&, std::string*) {
      served_.fetch_add(1);
      Hold();
      return Result<DatasetRefreshReply>(DatasetRefreshReply{.meta = {.name = r.name}});
    });
  }
  ~FakeCoordinator() {
    Release();
    server_->Stop();
  }

  Status Start() { return server_->Start(); }
  void Stop() {
    Release();
    server_->Stop();
  }
  const std::string& endpoint() const { return server_->bound_endpoint(); }
  int asked() const { return asked_.load(); }    // requests that reached the gate
  int served() const { return served_.load(); }  // ... and a handler
  void set_hold(bool hold) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    hold_ = hold;
  }
  void Release() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    hold_ = false;
    cv_.NotifyAll();
  }
  // Serves whatever the election says: the old leader of a takeover that
  // has not noticed yet, while the client cannot tell.
  void set_leads(bool leads) { leads_.store(leads); }
  // Runs at every request, on a worker thread, before the gate decides.
  void OnAsked(std::function<void()> f) { on_asked_ = std::move(f); }

 private:
  void Hold() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (hold_) cv_.Wait(&mu_);
  }

  Election* election_;
  std::unique_ptr<RpcServer> server_;
  std::atomic<int> asked_{0};
  std::atomic<int> served_{0};
  std::atomic<bool> leads_{false};
  std::function<void()> on_asked_;  // set before the first request
  Mutex mu_;
  CondVar cv_;
  bool hold_ GUARDED_BY(mu_) = false;
};

class LeaderClientTest : public ::testing::Test {
 protected:
  // Starts `n` coordinators; nobody leads yet.
  void StartCoordinators(int n) {
    for (int i = 0; i < n; ++i) {
      coords_.push_back(std::make_unique<FakeCoordinator>(&ctx_, &election_, ++n_));
      ASSERT_TRUE(coords_.back()->Start().ok());
    }
  }
  FakeCoordinator& c(int i) { return *coords_[i]; }
  std::string List(std::initializer_list<int> which) {
    std::string list;
    for (int i : which) list += (list.empty() ? "" : ",") + c(i).endpoint();
    return list;
  }
  static LeaderClient::Options Fast() {
    return {.failover_wait = 5s, .backoff = 10ms, .connect_timeout = 200ms};
  }

  zmq::context_t ctx_;
  Election election_;
  std::vector<std::unique_ptr<FakeCoordinator>> coords_;
  static inline int n_ = 0;
};

TEST(SplitEndpointsTest, CommasSpacesEmptiesAndDuplicates) {
  EXPECT_EQ(SplitEndpoints("tcp://a:1"), std::vector<std::string>{"tcp://a:1"});
  EXPECT_EQ(SplitEndpoints(" tcp://a:1 ,tcp://b:2,,tcp://a:1,"), (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
  EXPECT_TRUE(SplitEndpoints("").empty());
}

TEST_F(LeaderClientTest, TwoStandbysNameTheThird) {
  StartCoordinators(3);
  election_.Elect(c(2).endpoint());
  LeaderClient client(ctx_, List({0, 1, 2}), Fast());
  Result<Pong> pong = client.Call(Ping{}, 2s);
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(pong->name, c(2).endpoint());
  EXPECT_EQ(client.endpoint(), c(2).endpoint());
  EXPECT_EQ(c(0).asked(), 1) << "the first standby named the leader";
  EXPECT_EQ(c(1).asked(), 0) << "so the second was never asked";
  // The leader is remembered: the next call goes straight to it.
  ASSERT_TRUE(client.Call(Ping{}, 2s).ok());
  EXPECT_EQ(c(0).asked(), 1);
  EXPECT_EQ(c(2).served(), 2);
}

TEST_F(LeaderClientTest, ALeaderOutsideTheListIsFollowed) {
  StartCoordinators(2);
  election_.Elect(c(1).endpoint());
  LeaderClient client(ctx_, List({0}), Fast());  // the list knows only the standby
  Result<Pong> pong = client.Call(Ping{}, 2s);
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(client.endpoint(), c(1).endpoint());
  EXPECT_EQ(c(1).served(), 1);
}

TEST_F(LeaderClientTest, NoLeaderNamedThenOneIsElected) {
  StartCoordinators(2);
  // The election ends while the client asks around: at the third request
  // either coordinator sees, the second one wins.
  std::atomic<int> requests{0};
  for (int i = 0; i < 2; ++i) {
    c(i).OnAsked([&] {
      if (requests.fetch_add(1) + 1 == 3) election_.Elect(c(1).endpoint());
    });
  }
  LeaderClient client(ctx_, List({0, 1}), Fast());
  Result<Pong> pong = client.Call(Ping{}, 2s);
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(client.endpoint(), c(1).endpoint());
  EXPECT_EQ(c(1).served(), 1);
  EXPECT_GE(requests.load(), 3);
}

TEST_F(LeaderClientTest, ADeadEndpointFirstInTheListIsSkipped) {
  StartCoordinators(2);
  const std::string dead = c(0).endpoint();
  c(0).Stop();
  election_.Elect(c(1).endpoint());
  LeaderClient client(ctx_, dead + "," + c(1).endpoint(), Fast());
  const auto start = std::chrono::steady_clock::now();
  Result<Pong> pong = client.Call(Ping{}, 5s);
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(client.endpoint(), c(1).endpoint());
  // The dead one cost its connection wait, not the call's 5 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  // Remembered: the next call does not try the dead one first.
  const auto again = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.Call(Ping{}, 5s).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - again, 150ms);
}

TEST_F(LeaderClientTest, TheLeaderMovesBetweenCalls) {
  StartCoordinators(3);
  election_.Elect(c(0).endpoint());
  LeaderClient client(ctx_, List({0, 1, 2}), Fast());
  ASSERT_TRUE(client.Call(Ping{}, 2s).ok());
  EXPECT_EQ(client.endpoint(), c(0).endpoint());
  election_.Elect(c(2).endpoint());  // a takeover: the old leader is a standby now
  ASSERT_TRUE(client.Call(Ping{}, 2s).ok());
  EXPECT_EQ(client.endpoint(), c(2).endpoint());
  EXPECT_EQ(c(0).served(), 1);
  EXPECT_EQ(c(2).served(), 1);
  EXPECT_EQ(c(1).asked(), 0);
}

TEST_F(LeaderClientTest, ALostReplyIsRetriedOnlyForAnIdempotentOrResendableRequest) {
  StartCoordinators(2);
  // Both serve (an old leader that has not noticed its takeover yet), and
  // the first holds its replies: a request goes out and no reply comes.
  c(0).set_leads(true);
  c(0).set_hold(true);
  c(1).set_leads(true);
  LeaderClient client(ctx_, List({0, 1}), Fast());
  Result<DatasetRefreshReply> refresh = client.Call(DatasetRefresh{.name = "d"}, 300ms);
  EXPECT_EQ(refresh.status().code(), Code::kUnavailable) << refresh.status().ToString();
  EXPECT_TRUE(client.last_call_timed_out());
  EXPECT_EQ(c(0).served(), 1);
  EXPECT_EQ(c(1).asked(), 0) << "a DatasetRefresh that may have been applied is not sent again";
  // A read is sent again, to the next coordinator.
  Result<ClusterMap> map = client.Call(GetClusterMap{}, 300ms);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->epoch, 7u);
  EXPECT_EQ(client.endpoint(), c(1).endpoint());
  EXPECT_EQ(c(0).served(), 2);
  EXPECT_EQ(c(1).served(), 1);
}

TEST_F(LeaderClientTest, AResendableRequestIsSentAgainMarkedAsARetry) {
  StartCoordinators(2);
  c(0).set_leads(true);
  c(0).set_hold(true);  // the first attempt goes out and gets no reply
  c(1).set_leads(true);
  LeaderClient client(ctx_, List({0, 1}), Fast());
  Result<DatasetAddReply> add = client.Call(DatasetAdd{.name = "d"}, 300ms);
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  EXPECT_EQ(add->meta.source, "resent") << "the second attempt carries retry";
  EXPECT_EQ(c(0).served(), 1);
  EXPECT_EQ(c(1).served(), 1);
  // A call answered at its first attempt is not marked.
  Result<DatasetAddReply> again = client.Call(DatasetAdd{.name = "e"}, 300ms);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->meta.source, "");
}

TEST_F(LeaderClientTest, FailoverWaitBoundsAClusterWithoutALeader) {
  StartCoordinators(2);
  LeaderClient::Options options = Fast();
  options.failover_wait = 300ms;
  LeaderClient client(ctx_, List({0, 1}), options);
  const auto start = std::chrono::steady_clock::now();
  Result<Pong> pong = client.Call(Ping{}, 2s);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(pong.status().code(), Code::kNotLeader);
  EXPECT_NE(pong.status().message().find("no coordinator led within 300 ms"), std::string::npos)
      << pong.status().message();
  EXPECT_NE(pong.status().message().find(c(0).endpoint()), std::string::npos);
  EXPECT_NE(pong.status().message().find(c(1).endpoint()), std::string::npos);
  EXPECT_GE(took, 300ms - options.backoff);
  EXPECT_LT(took, 2s);
  EXPECT_GT(c(0).asked() + c(1).asked(), 2) << "asked again after each backoff";
}

TEST_F(LeaderClientTest, OneDeadEndpointFailsAsAnRpcClientDoes) {
  StartCoordinators(1);
  const std::string dead = c(0).endpoint();
  c(0).Stop();
  LeaderClient client(ctx_, dead, Fast());
  client.set_connect_timeout(100ms);
  const auto start = std::chrono::steady_clock::now();
  Result<Pong> pong = client.Call(Ping{}, 2s);
  EXPECT_EQ(pong.status().code(), Code::kUnavailable);
  EXPECT_FALSE(client.last_call_answered());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "one attempt, no failover wait";
}

TEST_F(LeaderClientTest, APoolSharesWhatItsClientsLearn) {
  StartCoordinators(3);
  election_.Elect(c(2).endpoint());
  LeaderPool pool(ctx_, List({0, 1, 2}), Fast());
  {
    auto first = pool.Acquire();
    auto second = pool.Acquire();  // a client of its own, made before anyone knew
    ASSERT_TRUE(first->Call(Ping{}, 2s).ok());
    EXPECT_EQ(pool.leader(), c(2).endpoint());
    ASSERT_TRUE(second->Call(Ping{}, 2s).ok());
    EXPECT_EQ(second->endpoint(), c(2).endpoint());
  }
  EXPECT_EQ(c(0).asked(), 1) << "the second client asked the leader first";
  EXPECT_EQ(pool.idle(), 2u);
}

}  // namespace
}  // namespace hoard::proto
