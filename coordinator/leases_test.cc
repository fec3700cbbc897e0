#include "coordinator/leases.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

proto::Caller Hook(int64_t uid) { return proto::Caller{.uid = uid, .job = "", .host = "gpu7"}; }

TEST(LeaseTableTest, TakeHoldsUntilItsExpiryAndRenewingMovesIt) {
  LeaseTable t;
  Result<proto::Lease> l = t.Take("ds", "job1", 100, "client", Hook(1000), 1000);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->taken_unix, 1000);
  EXPECT_EQ(l->expires_unix, 1100);
  EXPECT_EQ(l->key_class, "client");
  EXPECT_EQ(l->holder.uid, 1000);
  EXPECT_EQ(t.HeldDatasets(1099), std::set<std::string>{"ds"});
  EXPECT_TRUE(t.HeldDatasets(1100).empty()) << "expired at its expiry";
  // A renewal (the same call) keeps when it was first taken.
  Result<proto::Lease> renewed = t.Take("ds", "job1", 100, "client", Hook(1000), 1050);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(renewed->taken_unix, 1000);
  EXPECT_EQ(renewed->renewed_unix, 1050);
  EXPECT_EQ(renewed->expires_unix, 1150);
  EXPECT_EQ(t.size(), 1u) << "taking twice is renewing";
  EXPECT_EQ(t.HeldDatasets(1120), std::set<std::string>{"ds"});
}

TEST(LeaseTableTest, DefaultTtlAndBadRequests) {
  LeaseTable t({.default_ttl_s = 3600, .max_ttl_s = 7200});
  EXPECT_EQ(t.Take("ds", "j", 0, "client", {}, 0)->expires_unix, 3600);
  EXPECT_EQ(t.Take("ds", "", 10, "client", {}, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t.Take("ds", std::string(300, 'j'), 10, "client", {}, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t.Take("ds", "a\nb", 10, "client", {}, 0).status().code(), Code::kInvalidArgument);
  Status too_long = t.Take("ds", "j", 7201, "client", {}, 0).status();
  EXPECT_EQ(too_long.code(), Code::kInvalidArgument);
  EXPECT_NE(too_long.message().find("maximum of 7200 s"), std::string::npos) << too_long.message();
}

TEST(LeaseTableTest, ReleaseOneOrAllOfAJobAndReleasingNothingIsFine) {
  LeaseTable t;
  ASSERT_TRUE(t.Take("a", "j1", 100, "client", {}, 0).ok());
  ASSERT_TRUE(t.Take("b", "j1", 100, "client", {}, 0).ok());
  ASSERT_TRUE(t.Take("b", "j2", 100, "client", {}, 0).ok());
  EXPECT_EQ(t.Release("a", "j1").size(), 1u);
  EXPECT_TRUE(t.Release("a", "j1").empty()) << "again: nothing, and no error";
  EXPECT_EQ(t.HeldDatasets(1), std::set<std::string>{"b"});
  EXPECT_EQ(t.Release("", "j1").size(), 1u) << "all of j1's: b";
  EXPECT_EQ(t.HeldDatasets(1), std::set<std::string>{"b"}) << "j2 still holds b";
  EXPECT_EQ(t.ReleaseDataset("b").size(), 1u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(LeaseTableTest, ExpireDropsOnlyExpiredLeases) {
  LeaseTable t;
  ASSERT_TRUE(t.Take("a", "short", 10, "client", {}, 0).ok());
  ASSERT_TRUE(t.Take("a", "long", 100, "client", {}, 0).ok());
  EXPECT_TRUE(t.Expire(9).empty());
  EXPECT_EQ(t.List(10).size(), 1u) << "List never shows an expired lease";
  std::vector<proto::Lease> gone = t.Expire(10);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].job, "short");
  EXPECT_EQ(t.size(), 1u);
  // An expired lease taken again is a new one.
  ASSERT_TRUE(t.Take("a", "long", 5, "client", {}, 200).ok());
  EXPECT_EQ(t.Find("a", "long")->taken_unix, 200);
}

TEST(LeaseTableTest, BoundsAreClearErrors) {
  LeaseTable t({.max_per_dataset = 2, .max_total = 3});
  ASSERT_TRUE(t.Take("a", "1", 10, "client", {}, 0).ok());
  ASSERT_TRUE(t.Take("a", "2", 10, "client", {}, 0).ok());
  Status per = t.Take("a", "3", 10, "client", {}, 0).status();
  EXPECT_EQ(per.code(), Code::kNoSpace);
  EXPECT_NE(per.message().find("maximum per dataset"), std::string::npos) << per.message();
  EXPECT_TRUE(t.Take("a", "2", 10, "client", {}, 0).ok()) << "renewing is never refused";
  ASSERT_TRUE(t.Take("b", "1", 10, "client", {}, 0).ok());
  Status total = t.Take("c", "1", 10, "client", {}, 0).status();
  EXPECT_EQ(total.code(), Code::kNoSpace);
  EXPECT_NE(total.message().find("its maximum"), std::string::npos) << total.message();
}

TEST(LeaseTableTest, LoadPutsBackWhatAllSaved) {
  LeaseTable t;
  ASSERT_TRUE(t.Take("a", "1", 10, "client", Hook(5), 0).ok());
  ASSERT_TRUE(t.Take("b", "2", 20, "admin", {}, 0).ok());
  LeaseTable u;
  u.Load(t.All());
  EXPECT_EQ(u.size(), 2u);
  EXPECT_EQ(u.Find("a", "1")->holder.uid, 5);
  EXPECT_EQ(u.HeldDatasets(15), std::set<std::string>{"b"});
}

}  // namespace
}  // namespace hoard
