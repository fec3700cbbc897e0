// MountList (coordinator/mount_list.h): the live mounts and their builds.
#include "coordinator/mount_list.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using namespace std::chrono_literals;

proto::MountInfo Mount(const std::string& node, const std::string& mountpoint, const std::string& version) {
  return {.node = node, .mountpoint = mountpoint, .build = {version, "1a2b3c4d5e6f"}};
}

TEST(MountListTest, ListsEachMountOnceWithItsLatestBuild) {
  FakeClock clock;
  MountList list({.clock = &clock});
  list.Heard(Mount("node1", "/mnt/hoard", "0.1.0"));
  list.Heard(Mount("node2", "/mnt/hoard", "0.1.0"));
  list.Heard({});  // a poll naming no mount (a node agent, the CLI): not a mount
  clock.Advance(1s);
  // node1's mount upgraded: it replaces its own entry.
  list.Heard(Mount("node1", "/mnt/hoard", "0.2.0"));
  std::vector<proto::MountInfo> live = list.Live();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].node, "node1");
  EXPECT_EQ(live[0].build.version, "0.2.0");
  EXPECT_EQ(live[0].last_seen_unix, clock.WallSeconds());
  EXPECT_EQ(live[1].node, "node2");
  EXPECT_EQ(live[1].build.version, "0.1.0");
  EXPECT_EQ(live[1].last_seen_unix, clock.WallSeconds() - 1);
}

TEST(MountListTest, ForgetsAMountSilentForAMinute) {
  FakeClock clock;
  MountList list({.clock = &clock});
  list.Heard(Mount("node1", "/mnt/a", "0.1.0"));
  list.Heard(Mount("node1", "/mnt/b", "0.1.0"));
  clock.Advance(30s);
  list.Heard(Mount("node1", "/mnt/b", "0.1.0"));
  clock.Advance(30s);
  EXPECT_EQ(list.Live().size(), 2u) << "60 s of silence is not yet more than 60 s";
  clock.Advance(1ms);
  std::vector<proto::MountInfo> live = list.Live();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].mountpoint, "/mnt/b");
  // It comes back with its next poll.
  list.Heard(Mount("node1", "/mnt/a", "0.1.0"));
  EXPECT_EQ(list.Live().size(), 2u);
}

TEST(MountListTest, KeepsStringsWithinTheirLimits) {
  FakeClock clock;
  MountList list({.clock = &clock});
  list.Heard({.node = std::string(1000, 'n'), .mountpoint = std::string(5000, 'm'),
              .build = {std::string(1000, 'v'), std::string(1000, 'c')}});
  std::vector<proto::MountInfo> live = list.Live();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_LE(live[0].node.size(), 255u);
  EXPECT_EQ(live[0].mountpoint.size(), proto::kMaxMountpointBytes);
  EXPECT_LE(live[0].build.version.size(), 64u);
  EXPECT_LE(live[0].build.commit.size(), 64u);
}

}  // namespace
}  // namespace hoard
