// Mount sessions at the coordinator: what they hold, when they end, and the
// cluster's checkpoint file locks.
#include "checkpoint/ckpt_sessions.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using namespace std::chrono_literals;

class CkptSessionsTest : public ::testing::Test {
 protected:
  CkptSessionsTest() { Restart(); }

  void Restart() {
    sessions_ = std::make_unique<CkptSessions>(CkptSessions::Options{
        .timeout = 10s,
        .lock_grace = 6s,
        .clock = &clock_,
        .logger = spdlog::default_logger(),
        .on_change = [this](std::set<proto::CkptHold> h, std::set<uint64_t> w, uint64_t mount,
                            const std::set<uint64_t>& mine) {
          holds_ = std::move(h);
          writing_ = std::move(w);
          reporter_ = mount;
          reported_ = mine;
        }});
  }
  // Past the grace a restarted coordinator gives reclaims.
  void PastGrace() { clock_.Advance(7s); }

  proto::CkptLockReply Take(uint64_t mount, uint64_t owner, uint8_t type, uint64_t start = 0,
                            uint64_t end = UINT64_MAX, bool flock = false) {
    Result<proto::CkptLockReply> r = sessions_->Lock(
        {.mount = mount, .lock = {.id = 7, .owner = owner, .flock = flock, .type = type, .start = start, .end = end,
                                  .pid = 1234}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : proto::CkptLockReply{};
  }

  FakeClock clock_;
  std::unique_ptr<CkptSessions> sessions_;
  std::set<proto::CkptHold> holds_;
  std::set<uint64_t> writing_;
  uint64_t reporter_ = 0;
  std::set<uint64_t> reported_;
};

TEST_F(CkptSessionsTest, WhatLiveSessionsHoldIsTheUnionUntilTheyEnd) {
  sessions_->Update({.mount = 1, .node = "n1", .holds = {{.id = 5, .gen = 2}}, .writing = {8}});
  EXPECT_EQ(reporter_, 1u);
  EXPECT_EQ(reported_, std::set<uint64_t>({8}));
  sessions_->Update({.mount = 2, .node = "n2", .holds = {{.id = 5, .gen = 3}}});
  EXPECT_EQ(holds_.size(), 2u);
  EXPECT_EQ(writing_, std::set<uint64_t>({8}));
  EXPECT_EQ(reporter_, 2u);
  // Each message replaces the session's last.
  sessions_->Update({.mount = 1, .node = "n1", .holds = {}});
  EXPECT_EQ(holds_, (std::set<proto::CkptHold>{{.id = 5, .gen = 3}}));
  EXPECT_TRUE(writing_.empty());
  // A silent mount's session ends (whatever its node agent does).
  sessions_->Update({.mount = 3, .node = "n3", .holds = {{.id = 9, .gen = 1}}});
  clock_.Advance(6s);
  sessions_->Update({.mount = 3, .node = "n3", .holds = {{.id = 9, .gen = 1}}});
  clock_.Advance(6s);
  sessions_->Expire();
  EXPECT_EQ(holds_, (std::set<proto::CkptHold>{{.id = 9, .gen = 1}})) << "mount 2 was silent for 12 s";
  EXPECT_EQ(reporter_, 0u);
  clock_.Advance(11s);
  sessions_->Expire();
  EXPECT_TRUE(holds_.empty());
  EXPECT_EQ(sessions_->sessions(), 0u);
}

TEST_F(CkptSessionsTest, TwoMountsNeverHoldConflictingLocks) {
  PastGrace();
  EXPECT_TRUE(Take(1, 100, 2, 0, UINT64_MAX, /*flock=*/true).granted);
  proto::CkptLockReply r = Take(2, 100, 2, 0, UINT64_MAX, /*flock=*/true);
  EXPECT_FALSE(r.granted);
  EXPECT_EQ(r.conflict.type, 2);
  EXPECT_EQ(r.conflict.pid, 0u) << "a pid from another node means nothing here";
  EXPECT_TRUE(Take(2, 100, 1, 0, 9).granted) << "a POSIX lock does not conflict with a flock";
  EXPECT_FALSE(Take(1, 100, 2, 5, 5).granted);
  // F_GETLK on the holder's own node reports its pid.
  sessions_->Update({.mount = 1, .node = "n1"});
  sessions_->Update({.mount = 3, .node = "n1"});
  Result<proto::CkptLockReply> t =
      sessions_->Lock({.mount = 3, .lock = {.id = 7, .owner = 1, .flock = true, .type = 1}, .test = true});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->granted);
  EXPECT_EQ(t->conflict.pid, 1234u);
  // The last close of the open file drops its flock.
  ASSERT_TRUE(sessions_->Lock({.mount = 1, .lock = {.id = 7, .owner = 100, .flock = true}, .release_owner = true}).ok());
  EXPECT_TRUE(Take(2, 100, 2, 0, UINT64_MAX, /*flock=*/true).granted);
}

TEST_F(CkptSessionsTest, ADeadMountsLocksAreReleased) {
  PastGrace();
  EXPECT_TRUE(Take(1, 100, 2).granted);
  EXPECT_FALSE(Take(2, 200, 2).granted);
  clock_.Advance(11s);
  sessions_->Update({.mount = 2, .node = "n2"});  // mount 2 is alive, mount 1 silent
  sessions_->Expire();
  EXPECT_TRUE(Take(2, 200, 2).granted);
  EXPECT_EQ(sessions_->locks(), 1u);
}

TEST_F(CkptSessionsTest, AfterARestartOnlyReclaimsGetLocksUntilTheGraceEnds) {
  PastGrace();
  EXPECT_TRUE(Take(1, 100, 2).granted);
  const uint64_t before = sessions_->incarnation();
  Restart();
  EXPECT_NE(sessions_->incarnation(), before);
  EXPECT_FALSE(Take(2, 200, 2).granted) << "mount 1 may still hold it";
  sessions_->Update({.mount = 1, .node = "n1", .reclaim = true, .locks = {{.id = 7, .owner = 100, .type = 2}}});
  PastGrace();
  EXPECT_FALSE(Take(2, 200, 2).granted) << "reclaimed by mount 1";
  EXPECT_TRUE(Take(1, 100, 0).granted);
  EXPECT_TRUE(Take(2, 200, 2).granted);
}

TEST_F(CkptSessionsTest, AMountWhoseSessionEndedReclaimsItsLocksUnlessTakenMeanwhile) {
  PastGrace();
  EXPECT_TRUE(sessions_->Update({.mount = 1, .node = "n1"}).fresh) << "its first message";
  EXPECT_FALSE(sessions_->Update({.mount = 1, .node = "n1"}).fresh);
  EXPECT_TRUE(Take(1, 100, 2, 0, 9).granted);
  EXPECT_TRUE(Take(1, 100, 2, 20, 29).granted);
  clock_.Advance(11s);  // cut off: its session ends, its locks with it
  sessions_->Expire();
  EXPECT_TRUE(Take(2, 200, 1, 5, 5).granted) << "taken while mount 1 was away";
  proto::CkptSessionReply back = sessions_->Update({.mount = 1, .node = "n1"});
  EXPECT_TRUE(back.fresh) << "the mount must learn that its locks were forgotten";
  back = sessions_->Update({.mount = 1, .node = "n1", .reclaim = true,
                            .locks = {{.id = 7, .owner = 100, .type = 2, .start = 0, .end = 9},
                                      {.id = 7, .owner = 100, .type = 2, .start = 20, .end = 29}}});
  ASSERT_EQ(back.lost.size(), 1u);
  EXPECT_EQ(back.lost[0].start, 0u);
  EXPECT_FALSE(Take(2, 200, 1, 25, 25).granted) << "the other one is held again";
}

TEST_F(CkptSessionsTest, MalformedLockRequestsAreRefused) {
  EXPECT_EQ(sessions_->Lock({.mount = 0, .lock = {.id = 7, .type = 1}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(sessions_->Lock({.mount = 1, .lock = {.id = 7, .type = 9}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(sessions_->Lock({.mount = 1, .lock = {.id = 7, .type = 1, .start = 9, .end = 3}}).status().code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoard
