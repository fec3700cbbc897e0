// Membership (coordinator/membership.h) on its own: registration, undo,
// silence and the views the coordinator saves and serves.
#include "coordinator/membership.h"

#include <gtest/gtest.h>

#include "coordinator/coordinator_parts_test_util.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using parts_test::At;

proto::RegisterNode Req(const std::string& name, uint64_t capacity = 1ull << 30, const std::string& port = "1") {
  return {.name = name, .endpoint = "tcp://127.0.0.1:" + port, .capacity_bytes = capacity};
}

TEST(MembershipTest, ANewNodeIsNewsAndChangesThePlacement) {
  Membership m;
  Membership::Registration r = m.Register(Req("n1"), At(0ms), 1000);
  EXPECT_TRUE(r.inserted);
  EXPECT_TRUE(r.placement_changed);
  EXPECT_TRUE(r.news);
  Membership::Node* n = m.Find("n1");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->info.up);
  EXPECT_EQ(n->info.weight, proto::CapacityWeight(1ull << 30));
  EXPECT_EQ(n->info.last_seen_unix, 1000);

  // The same registration again (a restart) changes nothing in the map.
  r = m.Register(Req("n1"), At(1s), 1001);
  EXPECT_FALSE(r.inserted);
  EXPECT_FALSE(r.placement_changed);
  EXPECT_FALSE(r.news);

  // Another endpoint is news, but not a placement change.
  r = m.Register(Req("n1", 1ull << 30, "2"), At(2s), 1002);
  EXPECT_TRUE(r.news);
  EXPECT_FALSE(r.placement_changed);
  // Another capacity is another weight: the placement changes.
  r = m.Register(Req("n1", 2ull << 30, "2"), At(3s), 1003);
  EXPECT_TRUE(r.placement_changed);
}

TEST(MembershipTest, UndoRegisterPutsBackWhatWasThere) {
  Membership m;
  Membership::Registration r = m.Register(Req("n1"), At(0ms), 0);
  m.UndoRegister("n1", r);
  EXPECT_EQ(m.Find("n1"), nullptr);
  EXPECT_EQ(m.size(), 0u);

  m.Register(Req("n1", 1ull << 30, "1"), At(0ms), 0);
  r = m.Register(Req("n1", 4ull << 30, "9"), At(1s), 0);
  m.UndoRegister("n1", r);
  ASSERT_NE(m.Find("n1"), nullptr);
  EXPECT_EQ(m.Find("n1")->info.endpoint, "tcp://127.0.0.1:1");
  EXPECT_EQ(m.Find("n1")->info.weight, proto::CapacityWeight(1ull << 30));
}

TEST(MembershipTest, SilentNodesGoDownAndADownDrainedOneMovesNothing) {
  Membership m;
  m.Register(Req("n1"), At(0ms), 0);
  m.Register(Req("n2"), At(0ms), 0);
  m.Register(Req("n3"), At(0ms), 0);
  m.Find("n3")->info.draining = true;
  ASSERT_NE(m.Heard({.name = "n1"}, At(4s), 4), nullptr);
  bool placement_changed = true;
  EXPECT_TRUE(m.MarkSilentDown(At(5s), 5s, 1005, false, &placement_changed).empty());  // exactly 5 s is not past
  EXPECT_FALSE(placement_changed);

  std::vector<proto::NodeInfo> down = m.MarkSilentDown(At(6s), 5s, 1006, false, &placement_changed);
  ASSERT_EQ(down.size(), 2u);
  EXPECT_EQ(down[0].name, "n2");
  EXPECT_TRUE(down[0].up) << "returned as it was";
  EXPECT_EQ(down[1].name, "n3");
  EXPECT_TRUE(placement_changed);  // n2 owned a share
  EXPECT_EQ(m.UpNames(), (std::set<std::string>{"n1"}));
  EXPECT_EQ(m.Find("n2")->info.down_since_unix, 1006);
  EXPECT_STREQ(proto::MemberState(m.Find("n2")->info), "out");
  // Already down: not again.
  EXPECT_TRUE(m.MarkSilentDown(At(7s), 5s, 1007, false, &placement_changed).empty());

  // Only a drained node silent: it owned nothing, the placement stays.
  Membership d;
  d.Register(Req("n3"), At(0ms), 0);
  d.Find("n3")->info.draining = true;
  EXPECT_EQ(d.MarkSilentDown(At(6s), 5s, 1006, false, &placement_changed).size(), 1u);
  EXPECT_FALSE(placement_changed);
}

// Down but held: the node keeps its placement weight (nothing moves) until
// MarkOut finds it down for longer than out_after; back before that, it
// is up with its placement as it was.
TEST(MembershipTest, ADownNodeIsHeldUntilOutAfter) {
  Membership m;
  m.Register(Req("n1"), At(0ms), 1000);
  m.Register(Req("n2"), At(0ms), 1000);
  const double weight = proto::PlacementWeight(m.Find("n2")->info);
  ASSERT_NE(m.Heard({.name = "n1"}, At(4s), 1004), nullptr);
  bool placement_changed = true;
  std::vector<proto::NodeInfo> down = m.MarkSilentDown(At(6s), 5s, 1006, /*hold=*/true, &placement_changed);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_FALSE(placement_changed) << "a held node keeps its share";
  const proto::NodeInfo& n2 = m.Find("n2")->info;
  EXPECT_FALSE(n2.up);
  EXPECT_TRUE(n2.held);
  EXPECT_EQ(n2.down_since_unix, 1006);
  EXPECT_EQ(proto::PlacementWeight(n2), weight);
  EXPECT_STREQ(proto::MemberState(n2), "down");
  EXPECT_EQ(m.UpNames(), (std::set<std::string>{"n1"})) << "readers and checkpoints skip it";

  // Not out before out_after whole seconds have passed.
  EXPECT_TRUE(m.MarkOut(1006 + 60, 60s, &placement_changed).empty());
  EXPECT_FALSE(placement_changed);
  // Out: its share goes.
  std::vector<proto::NodeInfo> out = m.MarkOut(1006 + 61, 60s, &placement_changed);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].held) << "returned as it was";
  EXPECT_TRUE(placement_changed);
  EXPECT_FALSE(m.Find("n2")->info.held);
  EXPECT_EQ(proto::PlacementWeight(m.Find("n2")->info), 0);
  EXPECT_STREQ(proto::MemberState(m.Find("n2")->info), "out");
  EXPECT_EQ(m.Find("n2")->info.down_since_unix, 1006) << "still down since then";
  // Undo puts the hold back (a commit that failed).
  m.Undo(out);
  EXPECT_TRUE(m.Find("n2")->info.held);

  // Back: up, not held, no down time; the same share as before it went down.
  Membership::Registration r = m.Register(Req("n2"), At(70s), 1070);
  EXPECT_FALSE(r.placement_changed) << "back within out_after: nothing moves";
  EXPECT_TRUE(r.news) << "but members must learn it is up";
  EXPECT_TRUE(m.Find("n2")->info.up);
  EXPECT_FALSE(m.Find("n2")->info.held);
  EXPECT_EQ(m.Find("n2")->info.down_since_unix, 0);

  // A drained node that goes out changes no placement.
  m.Find("n2")->info.draining = true;
  ASSERT_NE(m.Heard({.name = "n1"}, At(100s), 1100), nullptr);
  ASSERT_EQ(m.MarkSilentDown(At(100s), 5s, 1100, true, &placement_changed).size(), 1u);
  EXPECT_EQ(m.MarkOut(1200, 60s, &placement_changed).size(), 1u);
  EXPECT_FALSE(placement_changed);
}

TEST(MembershipTest, RestartTimeoutsGivesEveryoneAFreshTimeout) {
  Membership m;
  m.Register(Req("n1"), At(0ms), 0);
  m.RestartTimeouts(At(10s));
  bool placement_changed = false;
  EXPECT_TRUE(m.MarkSilentDown(At(14s), 5s, 14, true, &placement_changed).empty());
  EXPECT_EQ(m.MarkSilentDown(At(16s), 5s, 16, true, &placement_changed).size(), 1u);
}

TEST(MembershipTest, HeartbeatFactsAreServedButNotSaved) {
  Membership m;
  EXPECT_EQ(m.Heard({.name = "nobody"}, At(0ms), 0), nullptr);
  m.Register(Req("n1"), At(0ms), 100);
  ASSERT_NE(m.Heard({.name = "n1",
                     .capacity_bytes = 1ull << 30,
                     .used_bytes = 7,
                     .chunks = 3,
                     .used_dataset_bytes = 4,
                     .used_read_tier_bytes = 2,
                     .used_checkpoint_bytes = 1},
                    At(1s), 101),
            nullptr);
  std::vector<proto::NodeInfo> served = m.Infos();
  ASSERT_EQ(served.size(), 1u);
  EXPECT_EQ(served[0].used_bytes, 7u);
  EXPECT_EQ(served[0].used_dataset_bytes, 4u);
  EXPECT_EQ(served[0].used_read_tier_bytes, 2u);
  EXPECT_EQ(served[0].used_checkpoint_bytes, 1u);
  EXPECT_EQ(served[0].chunks, 3u);
  EXPECT_EQ(served[0].last_seen_unix, 101);
  std::vector<proto::NodeInfo> saved = m.DurableInfos();
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].used_bytes, 0u);
  EXPECT_EQ(saved[0].used_dataset_bytes + saved[0].used_read_tier_bytes + saved[0].used_checkpoint_bytes, 0u);
  EXPECT_EQ(saved[0].chunks, 0u);
  EXPECT_EQ(saved[0].last_seen_unix, 0);
  EXPECT_TRUE(saved[0].up);
  EXPECT_EQ(saved[0].weight, served[0].weight);
}

// The node agent's build (`hoard status` shows it per node): from its
// registration, then from each heartbeat; volatile, so never saved, and a new
// build is no news for the map.
TEST(MembershipTest, BuildIsServedButNotSaved) {
  Membership m;
  proto::RegisterNode req = Req("n1");
  req.build = {"0.1.0", "1a2b3c4d5e6f"};
  m.Register(req, At(0ms), 100);
  EXPECT_EQ(m.Infos()[0].build, (proto::Build{"0.1.0", "1a2b3c4d5e6f"}));
  // Upgraded in place: the next registration says so, and is not news.
  req.build = {"0.2.0", "abcdefabcdef"};
  EXPECT_FALSE(m.Register(req, At(1s), 101).news);
  EXPECT_EQ(m.Infos()[0].build.version, "0.2.0");
  ASSERT_NE(m.Heard({.name = "n1", .build = {"0.2.0", "abcdefabcdef-dirty"}}, At(2s), 102), nullptr);
  EXPECT_EQ(m.Infos()[0].build.commit, "abcdefabcdef-dirty");
  EXPECT_EQ(m.DurableInfos()[0].build, proto::Build{});
  // An agent from before builds were reported sends none: unknown, not the last one seen.
  ASSERT_NE(m.Heard({.name = "n1"}, At(3s), 103), nullptr);
  EXPECT_EQ(m.Infos()[0].build, proto::Build{});
}

TEST(MembershipTest, RemoveAndRestoreAndLoad) {
  Membership m;
  m.Register(Req("n1"), At(0ms), 0);
  EXPECT_FALSE(m.Remove("nobody").has_value());
  std::optional<Membership::Node> n = m.Remove("n1");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(m.size(), 0u);
  m.Restore("n1", std::move(*n));
  EXPECT_NE(m.Find("n1"), nullptr);

  // Loaded nodes keep up/down and get a full timeout from the load; a held
  // one keeps its hold and when it went down.
  proto::NodeInfo down{.name = "n2", .weight = 1, .up = false, .down_since_unix = 500, .held = true};
  m.Load({m.Find("n1")->info, down}, At(100s));
  EXPECT_EQ(m.UpNames(), (std::set<std::string>{"n1"}));
  bool placement_changed = false;
  EXPECT_TRUE(m.MarkSilentDown(At(104s), 5s, 604, true, &placement_changed).empty());
  EXPECT_TRUE(m.MarkOut(560, 60s, &placement_changed).empty());
  EXPECT_EQ(m.MarkOut(561, 60s, &placement_changed).size(), 1u);
}

TEST(MembershipTest, CheckpointClasses) {
  Membership m;
  m.Register(Req("up"), At(0ms), 0);
  m.Register(Req("leaving"), At(0ms), 0);
  m.Find("leaving")->info.draining = true;
  m.Register(Req("down"), At(0ms), 0);
  m.Register(Req("lost"), At(0ms), 0);
  m.Find("down")->info.up = false;
  m.Find("lost")->info.up = false;
  m.Heard({.name = "up"}, At(200s), 0);
  m.Heard({.name = "leaving"}, At(200s), 0);
  m.Heard({.name = "down"}, At(150s), 0);
  std::set<std::string> up, lost, leaving;
  m.CkptClasses(At(200s), 120s, &up, &lost, &leaving);
  EXPECT_EQ(up, (std::set<std::string>{"leaving", "up"}));
  EXPECT_EQ(leaving, (std::set<std::string>{"leaving"}));
  EXPECT_EQ(lost, (std::set<std::string>{"lost"}));
}

}  // namespace
}  // namespace hoard
