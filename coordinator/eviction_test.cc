#include "coordinator/eviction.h"

#include <gtest/gtest.h>

namespace hoard::eviction {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// Three nodes of 10 GiB, equal weights: a dataset of B bytes with one replica
// is charged B/3 on each.
class PlanTest : public ::testing::Test {
 protected:
  PlanTest() {
    for (const char* n : {"node1", "node2", "node3"}) in_.nodes.push_back({n, 1.0, 10 * kGiB, 0});
  }

  // A warm, resident dataset of `gib` GiB (one replica), read at `read`.
  proto::DatasetMeta& Add(const std::string& name, uint64_t gib, int64_t read = 0, bool warm = true) {
    Dataset d;
    d.meta.name = name;
    d.meta.total_bytes = gib * kGiB;
    d.meta.replicas = 1;
    d.meta.warm = warm;
    d.meta.created_unix = 1000;
    d.meta.last_read_unix = read;
    in_.datasets.push_back(d);
    return in_.datasets.back().meta;
  }
  Result<Plan> Admit(const std::string& name) {
    in_.admit = name;
    return PlanAdmission(in_);
  }
  std::vector<std::string> Evicts(const std::string& name) {
    Result<Plan> p = Admit(name);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? p->evict : std::vector<std::string>{"<failed>"};
  }

  PlanInput in_;
};

TEST_F(PlanTest, FitsWithoutEvicting) {
  Add("a", 12, 5000);
  Add("new", 15, 0, false);
  EXPECT_TRUE(Evicts("new").empty());  // 4 + 5 GiB of 10 on each node
}

TEST_F(PlanTest, EvictsTheLeastRecentlyReadFirst) {
  Add("recent", 12, 9000);
  Add("old", 12, 2000);
  Add("never", 3, 0);  // counts from its creation (1000): the oldest, but freeing 1 GiB is not enough
  Add("new", 15, 0, false);
  // 4 + 4 + 1 + 5 = 14 GiB > 10: "never" goes first, then "old".
  EXPECT_EQ(Evicts("new"), (std::vector<std::string>{"never", "old"}));
}

TEST_F(PlanTest, LowerPriorityGoesBeforeOlder) {
  Add("old", 12, 2000);
  Add("low", 12, 9000).priority = proto::kPriorityLow;
  Add("new", 15, 0, false);
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"low"});
}

// The nodes' reported shares, not the expected ones, are charged: hashing
// gave node2 more than a third of "a" and of "new" (as happened with 160
// chunks: 69 on one node), and on the expectation "new" would have been
// admitted beside "a" and stalled on node2's full disk.
TEST_F(PlanTest, ChargesTheSharesTheNodesReported) {
  Add("older", 3, 100);  // 1 GiB a node
  Add("a", 12, 5000);    // expected 4 GiB a node; node2 owns 5.5
  Add("new", 12, 0, false);
  EXPECT_TRUE(Evicts("new").empty());  // expected: 1 + 4 + 4 = 9 GiB of 10
  for (Dataset& d : in_.datasets) {
    if (d.meta.name == "a") d.owned = {{"node1", 3 * kGiB}, {"node2", 11 * kGiB / 2}, {"node3", 7 * kGiB / 2}};
    if (d.meta.name == "new") d.owned = {{"node2", 9 * kGiB / 2}};  // node1, node3: not reported, expected
  }
  // node2: 1 + 5.5 + 4.5 = 11 GiB > 10: "older" goes, then 10 fits.
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"older"});
  for (Dataset& d : in_.datasets) {
    if (d.meta.name == "new") d.owned["node2"] = 5 * kGiB;
  }
  // 5.5 + 5 > 10 with "older" gone too, and "a" is the only one left to go.
  EXPECT_EQ(Evicts("new"), (std::vector<std::string>{"older", "a"}));
}

TEST_F(PlanTest, NeverPinnedLeasedOrHigherPriority) {
  Add("pinned", 6, 100).pinned = true;
  Add("leased", 6, 200);
  in_.leased = {"leased"};
  Add("high", 6, 300).priority = proto::kPriorityHigh;
  Add("victim", 6, 400);
  Add("new", 9, 0, false);
  // 2 * 4 + 3 = 11 GiB: only "victim" may go, and it is enough.
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"victim"});
}

TEST_F(PlanTest, NothingEvictableFailsAtOnceSayingWhatHoldsTheSpace) {
  Add("ds-a", 12, 100).pinned = true;
  Add("ds-b", 9, 200);
  in_.leased = {"ds-b"};
  Add("ds-c", 6, 300).priority = proto::kPriorityHigh;
  Add("new", 9, 0, false);
  Result<Plan> p = Admit("new");
  ASSERT_EQ(p.status().code(), Code::kNoSpace);
  // 4 + 3 + 2 + 3 = 12 GiB on a 10 GiB node.
  EXPECT_NE(p.status().message().find("needs 2.00 GiB more on node"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("held by pinned ds-a (4.00 GiB), leased ds-b (3.00 GiB), higher priority "
                                      "ds-c (2.00 GiB)"),
            std::string::npos)
      << p.status().message();
}

TEST_F(PlanTest, EvictsOnlyWhatIsNeeded) {
  Add("a", 9, 100);
  Add("b", 9, 200);
  Add("c", 9, 300);
  Add("new", 6, 0, false);
  // 3 * 3 + 2 = 11 GiB: evicting "a" alone makes room.
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"a"});
}

// Evicting others would not make it fit: it is admitted as it is, evicting
// nothing, and its owners keep a stable subset.
TEST_F(PlanTest, ADatasetLargerThanTheCacheIsAdmittedAsASubsetEvictingNothing) {
  Add("a", 9, 100);
  Add("huge", 60, 0, false);
  Result<Plan> p = Admit("huge");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->partial);
  EXPECT_TRUE(p->evict.empty());
  Add("fits", 3, 0, false);
  Result<Plan> q = Admit("fits");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_FALSE(q->partial);
}

TEST_F(PlanTest, NonResidentAndUnwarmedDatasetsAreChargedWhatTheyHold) {
  Add("evicted", 27, 100).resident = false;  // charged nothing
  Add("browsed", 27, 200, /*warm=*/false);   // read through: charged what nodes report
  in_.datasets.back().held = {{"node1", 1 * kGiB}, {"node2", 1 * kGiB}, {"node3", 1 * kGiB}};
  Add("new", 27, 0, false);  // 9 GiB per node
  EXPECT_TRUE(Evicts("new").empty());
  in_.datasets[1].held["node2"] = 2 * kGiB;
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"browsed"});
}

TEST_F(PlanTest, ReplicasAndWeightsShapeTheShares) {
  in_.nodes[0].weight = 2;  // node1 owns half: 2/(2+1+1)
  Add("a", 8, 100);         // 4 GiB on node1
  Add("new", 13, 0, false);  // 6.5 GiB on node1: 10.5 > 10
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"a"});
  in_.datasets.back().meta.replicas = 3;  // a node holds one copy: 13 GiB > 10 on every node
  Result<Plan> p = Admit("new");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->partial) << "larger than the cache: a subset, evicting nothing";
  EXPECT_TRUE(p->evict.empty());
}

TEST_F(PlanTest, NodesWithoutCapacityDoNotConstrain) {
  for (Node& n : in_.nodes) n.capacity_bytes = 0;
  Add("a", 100, 100);
  Add("new", 100, 0, false);
  EXPECT_TRUE(Evicts("new").empty());
}

TEST_F(PlanTest, OtherBytesCount) {
  in_.nodes[1].other_bytes = 6 * kGiB;  // checkpoints on node2
  Add("a", 9, 100);
  Add("new", 6, 0, false);
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"a"});
}

TEST_F(PlanTest, UnknownDataset) { EXPECT_EQ(Admit("nope").status().code(), Code::kNotFound); }

TEST_F(PlanTest, QuotaEvictPolicyEvictsWithinTheTenantFirst) {
  Add("other-old", 6, 2000).tenant = "b";
  Add("mine-new", 6, 9000).tenant = "a";
  Add("mine-old", 6, 5000).tenant = "a";
  Add("new", 6, 0, false).tenant = "a";
  in_.quotas = {{"a", 13 * kGiB}};
  // Tenant a: 12 + 6 > 13: its oldest goes, though b's is older; then the
  // nodes hold 2 + 2 + 2 (+2 new) = 8 GiB: no more.
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"mine-old"});
}

TEST_F(PlanTest, CapacityEvictionPrefersTheTenantWithAQuota) {
  Add("other-old", 9, 2000).tenant = "b";
  Add("mine", 9, 9000).tenant = "a";
  Add("new", 15, 0, false).tenant = "a";
  in_.quotas = {{"a", 100 * kGiB}};  // within quota, but the nodes are short
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"mine"});
  in_.quotas.clear();  // no quota: least recently read first, whoever's
  EXPECT_EQ(Evicts("new"), std::vector<std::string>{"other-old"});
}

TEST_F(PlanTest, QuotaRejectPolicyFailsAtOnce) {
  Add("mine", 6, 500).tenant = "a";
  Add("new", 6, 0, false).tenant = "a";
  in_.quotas = {{"a", 10 * kGiB}};
  in_.policy = QuotaPolicy::kReject;
  Result<Plan> p = Admit("new");
  ASSERT_EQ(p.status().code(), Code::kNoSpace);
  EXPECT_NE(
      p.status().message().find("would take tenant a over its quota of 10.0 GiB by 2.00 GiB: held by mine (6.00 GiB)"),
      std::string::npos)
      << p.status().message();
  in_.quotas = {{"a", 12 * kGiB}};
  EXPECT_TRUE(Evicts("new").empty());
}

TEST_F(PlanTest, QuotaThatCannotBeMetSaysWhy) {
  Add("mine", 6, 500).tenant = "a";
  in_.datasets.back().meta.pinned = true;
  Add("new", 6, 0, false).tenant = "a";
  in_.quotas = {{"a", 10 * kGiB}};
  Result<Plan> p = Admit("new");
  ASSERT_EQ(p.status().code(), Code::kNoSpace);
  EXPECT_NE(p.status().message().find("needs 2.00 GiB more of tenant a's quota of 10.0 GiB: held by pinned mine"),
            std::string::npos)
      << p.status().message();
  in_.quotas = {{"a", 5 * kGiB}};
  EXPECT_NE(Admit("new").status().message().find("larger than tenant a's quota"), std::string::npos);
}

TEST(TtlTest, ExpiresUnreadDatasetsExceptPinnedAndLeased) {
  auto ds = [](const std::string& name, int64_t ttl, int64_t read, bool pinned = false, bool resident = true) {
    Dataset d;
    d.meta.name = name;
    d.meta.ttl_s = ttl;
    d.meta.created_unix = 1000;
    d.meta.last_read_unix = read;
    d.meta.pinned = pinned;
    d.meta.resident = resident;
    return d;
  };
  const std::vector<Dataset> all = {ds("no-ttl", 0, 0),           ds("read-lately", 600, 4900),
                                    ds("stale", 600, 4000),        ds("never-read", 3000, 0),
                                    ds("pinned", 60, 0, true),     ds("leased", 60, 0),
                                    ds("gone", 60, 0, false, false)};
  EXPECT_EQ(ExpiredByTtl(all, {"leased"}, 5000), (std::vector<std::string>{"never-read", "stale"}));
  EXPECT_EQ(ExpiredByTtl(all, {"leased"}, 3999), std::vector<std::string>{});
}

TEST(QuotaUsageTest, CountsResidentDatasetsByTenant) {
  auto ds = [](const std::string& name, const std::string& tenant, bool warm, bool resident) {
    Dataset d;
    d.meta.name = name;
    d.meta.tenant = tenant;
    d.meta.total_bytes = 100;
    d.meta.replicas = 2;
    d.meta.warm = warm;
    d.meta.resident = resident;
    d.held = {{"n1", 30}};
    return d;
  };
  const std::vector<proto::TenantQuota> q =
      QuotaUsage({ds("a1", "a", true, true), ds("a2", "a", false, true), ds("a3", "a", false, false),
                  ds("d1", "default", true, true)},
                 {{"a", 1000}, {"c", 50}});
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].tenant, "a");
  EXPECT_EQ(q[0].quota_bytes, 1000u);
  EXPECT_EQ(q[0].used_bytes, 200u + 30u);
  EXPECT_EQ(q[0].datasets, 2u);
  EXPECT_EQ(q[1].tenant, "c");
  EXPECT_EQ(q[1].used_bytes, 0u);
  EXPECT_EQ(q[2].tenant, "default");
  EXPECT_EQ(q[2].quota_bytes, 0u);
  EXPECT_EQ(q[2].used_bytes, 200u);
}

}  // namespace
}  // namespace hoard::eviction
