#include "store/disk_usage.h"

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"

namespace hoard {
namespace {

class DiskUsageTest : public ::testing::Test {
 protected:
  // A budget for a tier of `size` on a disk with `free` bytes free, of which
  // `min_free` must stay free, on a node that published `node` (if any).
  uint64_t Allowed(uint64_t tier_used, uint64_t size, uint64_t free, uint64_t min_free,
                   std::optional<NodeUsageRecord> node) {
    if (node) {
      EXPECT_TRUE(WriteNodeUsage(node_path_, *node).ok());
    }
    ReadTierBudget budget({.dir = tmp_.path(),
                           .node_usage_path = node_path_,
                           .size_bytes = size,
                           .min_free_bytes = min_free,
                           .disk_free = [free] { return std::optional<uint64_t>(free); }});
    return budget.Allowed(tier_used);
  }

  hoard::testing::TempDir tmp_{"hoard-disk-usage"};
  std::string node_path_ = NodeUsagePath(tmp_.path());
};

TEST_F(DiskUsageTest, FilesSayWhatWasWrittenAndAbsentIsNotFound) {
  EXPECT_EQ(ReadNodeUsage(node_path_).status().code(), Code::kNotFound);
  EXPECT_EQ(ReadReadTierUsage(ReadTierUsagePath(tmp_.path())).status().code(), Code::kNotFound);
  const NodeUsageRecord r{.capacity_bytes = 64 << 20,
                          .usage = {.dataset_bytes = 3, .read_tier_bytes = 5, .checkpoint_bytes = 7},
                          .dataset_wanted_bytes = 11};
  ASSERT_TRUE(WriteNodeUsage(node_path_, r).ok());
  Result<NodeUsageRecord> back = ReadNodeUsage(node_path_);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(back->usage.total(), 15u);
  ASSERT_TRUE(WriteReadTierUsage(ReadTierUsagePath(tmp_.path()), {.used_bytes = 10, .reserved_bytes = 20}).ok());
  Result<ReadTierUsage> tier = ReadReadTierUsage(ReadTierUsagePath(tmp_.path()));
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ(*tier, (ReadTierUsage{.used_bytes = 10, .reserved_bytes = 20}));
  EXPECT_EQ(DefaultReadTierDir("/s/store"), "/s/store/read-tier");
}

TEST_F(DiskUsageTest, UnknownKeysAndBadLinesAreSkippedAndAReservationIsNeverBelowUse) {
  // A newer writer's extra keys, and junk, read as what they can.
  ASSERT_TRUE(WriteFileAtomic(ReadTierUsagePath(tmp_.path()), "used_bytes 100\nfuture_key 9\nreserved_bytes x\n").ok());
  Result<ReadTierUsage> tier = ReadReadTierUsage(ReadTierUsagePath(tmp_.path()));
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ(*tier, (ReadTierUsage{.used_bytes = 100, .reserved_bytes = 100}));
}

TEST_F(DiskUsageTest, TheTierGetsWhatCheckpointsAndWarmUpsLeaveOfTheCapacity) {
  NodeUsageRecord r{.capacity_bytes = 100, .usage = {.dataset_bytes = 20, .checkpoint_bytes = 30}};
  EXPECT_EQ(ReadTierAllowance(r), 50u);
  r.dataset_wanted_bytes = 60;  // a warm-up under way: the tier leaves it room now
  EXPECT_EQ(ReadTierAllowance(r), 10u);
  r.usage.checkpoint_bytes = 70;  // checkpoints never yield: nothing left
  EXPECT_EQ(ReadTierAllowance(r), 0u);
  r.capacity_bytes = 0;  // no --capacity: only the disk bounds the node
  EXPECT_EQ(ReadTierAllowance(r), UINT64_MAX);
}

TEST_F(DiskUsageTest, TheBudgetIsTheLeastOfSizeCapacityAndDisk) {
  const NodeUsageRecord node{.capacity_bytes = 1000, .usage = {.dataset_bytes = 300, .checkpoint_bytes = 200}};
  // The size bounds it.
  EXPECT_EQ(Allowed(0, 100, 1 << 20, 0, node), 100u);
  // The node's capacity: 1000 - 300 - 200.
  EXPECT_EQ(Allowed(0, 10'000, 1 << 20, 0, node), 500u);
  // The disk: 150 free above the floor, plus the 100 the tier holds.
  EXPECT_EQ(Allowed(100, 10'000, 250, 100, node), 250u);
  // A disk below its floor: the tier may keep nothing.
  EXPECT_EQ(Allowed(100, 10'000, 10, 1000, node), 0u);
}

TEST_F(DiskUsageTest, WithoutANodeAgentOnlyTheSizeAndTheDiskBoundTheTier) {
  EXPECT_EQ(Allowed(0, 700, 1 << 20, 0, std::nullopt), 700u);
  ReadTierBudget no_node({.dir = tmp_.path(),
                          .size_bytes = 700,
                          .min_free_bytes = 100,
                          .disk_free = [] { return std::optional<uint64_t>(400); }});
  EXPECT_EQ(no_node.Allowed(0), 300u);
}

}  // namespace
}  // namespace hoard
