#include "consensus/leader_election.h"

#include <future>
#include <memory>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/testing.h"
#include "consensus/faulty_kv.h"
#include "consensus/mem_kv.h"

namespace hoard {
namespace {

using std::chrono::seconds;
using testing::Eventually;

class LeaderElectionTest : public ::testing::Test {
 protected:
  // A candidate with its own view of the shared store.
  struct Candidate {
    std::unique_ptr<FaultyKv> kv;
    std::unique_ptr<LeaderElection> election;
  };

  Candidate Make(const std::string& name) {
    Candidate c;
    c.kv = std::make_unique<FaultyKv>(&store_);
    c.election = std::make_unique<LeaderElection>(
        c.kv.get(), LeaderElection::Options{.key = "/hoard/t/leader",
                                            .value = name,
                                            .ttl = seconds(3),
                                            .poll = std::chrono::milliseconds(100),
                                            .clock = &clock_,
                                            .logger = std::make_shared<spdlog::logger>(
                                                name, std::make_shared<spdlog::sinks::null_sink_mt>())});
    return c;
  }

  // Moves the fake clock in small steps until `pred` holds (the election's
  // threads wait on it), or fails after 60 fake seconds.
  template <typename Pred>
  bool AdvanceUntil(Pred pred) {
    for (int i = 0; i < 600; ++i) {
      if (pred()) return true;
      clock_.Advance(std::chrono::milliseconds(100));
      if (Eventually(pred, std::chrono::milliseconds(5))) return true;
    }
    return pred();
  }

  FakeClock clock_;
  MemKv store_{MemKv::Options{.clock = &clock_}};
};

TEST_F(LeaderElectionTest, OneCandidateLeadsAndTheOtherKnowsWho) {
  Candidate a = Make("tcp://a:1");
  Candidate b = Make("tcp://b:1");
  Result<Fence> fa = a.election->Campaign();
  ASSERT_TRUE(fa.ok()) << fa.status().ToString();
  EXPECT_TRUE(a.election->Leading());
  EXPECT_EQ(a.election->leader(), "tcp://a:1");

  auto fb = std::async(std::launch::async, [&] { return b.election->Campaign(); });
  ASSERT_TRUE(Eventually([&] { return b.election->leader() == "tcp://a:1"; }));
  // A renews every ttl/3 (1 s), which keeps it leading well past its TTL:
  // each step waits for that renewal to reach the store before the next.
  const int before = a.kv->calls();
  for (int i = 1; i <= 10; ++i) {
    clock_.Advance(seconds(1));
    ASSERT_TRUE(Eventually([&] { return a.kv->calls() >= before + i; })) << "renewal " << i;
    ASSERT_TRUE(a.election->Leading()) << "after " << i << " s";
  }
  EXPECT_EQ(fb.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  b.election->Stop();
  // (B is inside a wait for the key, which lasts `poll` of fake time.)
  ASSERT_TRUE(AdvanceUntil([&] { return fb.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready; }));
  EXPECT_EQ(fb.get().status().code(), Code::kUnavailable);
  EXPECT_TRUE(a.election->Leading());
}

TEST_F(LeaderElectionTest, AResignationHandsOverAtOnceWithANewFence) {
  Candidate a = Make("tcp://a:1");
  Candidate b = Make("tcp://b:1");
  Result<Fence> fa = a.election->Campaign();
  ASSERT_TRUE(fa.ok());
  auto fb = std::async(std::launch::async, [&] { return b.election->Campaign(); });
  ASSERT_TRUE(Eventually([&] { return b.election->leader() == "tcp://a:1"; }));
  a.election->Resign();
  EXPECT_FALSE(a.election->Leading());
  ASSERT_TRUE(AdvanceUntil([&] { return fb.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready; }));
  Result<Fence> got = fb.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT(got->create_revision, fa->create_revision);
  EXPECT_TRUE(b.election->Leading());
  EXPECT_EQ(a.election->WaitLost().code(), Code::kUnavailable);
}

TEST_F(LeaderElectionTest, ALeaderCutOffStopsLeadingBeforeAnotherTakesOverAndIsFencedOut) {
  Candidate a = Make("tcp://a:1");
  Candidate b = Make("tcp://b:1");
  Result<Fence> fa = a.election->Campaign();
  ASSERT_TRUE(fa.ok());
  auto fb = std::async(std::launch::async, [&] { return b.election->Campaign(); });
  ASSERT_TRUE(Eventually([&] { return b.election->leader() == "tcp://a:1"; }));

  a.kv->set_cut(true);  // A can no longer renew; etcd expires its lease after 3 s
  auto lost = std::async(std::launch::async, [&] { return a.election->WaitLost(); });
  // A stops leading by its own clock no later than B can win.
  ASSERT_TRUE(AdvanceUntil([&] {
    return fb.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready || !a.election->Leading();
  }));
  EXPECT_FALSE(a.election->Leading());
  ASSERT_TRUE(AdvanceUntil([&] { return fb.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready; }));
  Result<Fence> fb_got = fb.get();
  ASSERT_TRUE(fb_got.ok()) << fb_got.status().ToString();
  EXPECT_EQ(lost.get().code(), Code::kUnavailable);

  // A comes back and writes as if it still led: its fence no longer holds.
  a.kv->set_cut(false);
  Result<KvTxnResult> stale = a.kv->Txn({fa->Compare()}, {KvOp::Put("/hoard/t/x", "from a")}, {});
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->succeeded);
  Result<KvTxnResult> fresh = b.kv->Txn({fb_got->Compare()}, {KvOp::Put("/hoard/t/x", "from b")}, {});
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->succeeded);
}

TEST_F(LeaderElectionTest, EtcdAwayAtTheStartIsWaitedFor) {
  Candidate a = Make("tcp://a:1");
  a.kv->set_cut(true);
  auto fa = std::async(std::launch::async, [&] { return a.election->Campaign(); });
  clock_.Advance(seconds(5));
  EXPECT_EQ(fa.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  a.kv->set_cut(false);
  ASSERT_TRUE(AdvanceUntil([&] { return fa.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready; }));
  EXPECT_TRUE(fa.get().ok());
  EXPECT_TRUE(a.election->Leading());
}

}  // namespace
}  // namespace hoard
