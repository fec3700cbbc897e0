#include "checkpoint/ckpt_holders.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using proto::CkptLevel;
using std::chrono::milliseconds;

// A file of two chunks at generation `gen`, written by `writer`, each chunk
// also on `replica`, committed at R with K = 2.
CkptNode File(uint64_t id, uint64_t gen, const std::string& writer, const std::string& replica) {
  CkptNode n;
  n.id = id;
  n.name = "f" + std::to_string(id);
  n.gen = gen;
  n.size = 8;
  n.chunk_size = 4;
  n.checksums = {10 * gen + 1, 10 * gen + 2};
  n.writer = writer;
  n.replicas = {{replica}, {replica}};
  n.replicas_wanted = 2;
  n.level = uint8_t(CkptLevel::kR);
  n.commit_seq = id;
  return n;
}

class CkptHoldersTest : public ::testing::Test {
 protected:
  void Put(const CkptNode& n) {
    if (const CkptNode* was = ns_.Find(n.id); was != nullptr) h_.Index(*was, false);
    ns_.Put(n);
    h_.Index(n, true);
  }
  void Apply(const CkptRecord& r) {
    for (const CkptNode& n : r.put) Put(n);
    for (uint64_t id : r.del) {
      h_.Index(*ns_.Find(id), false);
      ns_.Del(id);
    }
    h_.ApplyDrops(r);
  }
  CkptNamespace ns_;
  CkptHolders h_{100};
};

TEST_F(CkptHoldersTest, ShownLevelCountsOnlyUpHoldersThatConfirmed) {
  CkptNode n = File(1, 1, "a", "b");
  n.unconfirmed = {{.gen = 1, .index = 0, .node = "b"}};
  Put(n);
  EXPECT_EQ(h_.ShownLevel(n), CkptLevel::kR);  // up nodes unknown: as committed
  h_.SetUp({"a", "b"});
  EXPECT_EQ(h_.ShownLevel(n), CkptLevel::kL);  // b has not confirmed chunk 0
  CkptRecord r;
  CkptHolders::StageConfirm(ns_, "b", {{1, 1, 0}}, &r);
  Apply(r);
  EXPECT_EQ(h_.ShownLevel(*ns_.Find(1)), CkptLevel::kR);
  h_.SetUp({"a"});
  EXPECT_EQ(h_.ShownLevel(*ns_.Find(1)), CkptLevel::kL);
}

TEST_F(CkptHoldersTest, RetireDropsOnlyWhatNoKeptGenerationUses) {
  // Generation 2 reuses chunk 0 of generation 1 (same copies on b).
  CkptNode old = File(1, 1, "a", "b");
  CkptNode c = File(1, 2, "a", "b");
  c.chunk_gens = {1, 2};
  c.checksums[0] = old.checksums[0];
  CkptHolders::KeepOldGen(&c, old, /*now_ms=*/1000);
  ASSERT_EQ(c.old_gens.size(), 1u);
  EXPECT_EQ(c.old_gens[0].writer, "");  // the same writer wrote over its copy
  Put(c);
  EXPECT_EQ(h_.old_generations(ns_), 1u);
  CkptRecord young;
  EXPECT_EQ(h_.Retire(ns_, 1500, milliseconds(1000), &young), 0u);  // within the grace
  h_.SetHolds({proto::CkptHold{.id = 1, .gen = 1}});
  CkptRecord held;
  EXPECT_EQ(h_.Retire(ns_, 5000, milliseconds(1000), &held), 0u);  // a reader has it open
  h_.SetHolds({});
  CkptRecord r;
  EXPECT_EQ(h_.Retire(ns_, 5000, milliseconds(1000), &r), 1u);
  // Chunk 0's copy is generation 2's too: only chunk 1's goes.
  ASSERT_EQ(r.drops_add.size(), 1u);
  EXPECT_EQ(r.drops_add[0].node, "b");
  EXPECT_EQ(r.drops_add[0].gen, 1u);
  EXPECT_EQ(r.drops_add[0].index, 1u);
  EXPECT_EQ(r.drops_add[0].seq, 1u);
  Apply(r);
  EXPECT_EQ(h_.old_generations(ns_), 0u);
  EXPECT_EQ(h_.pending_drops(), 1u);
  EXPECT_EQ(h_.next_drop_seq(), 1u);  // the façade fills the counters in
}

TEST_F(CkptHoldersTest, AnOrphanGoesWithItsLastGeneration) {
  Put(File(1, 1, "a", "b"));
  CkptRecord removed;
  CkptHolders::Orphan(&removed, *ns_.Find(1), /*now_ms=*/1000);
  ASSERT_EQ(removed.put.size(), 1u);
  EXPECT_TRUE(removed.put[0].orphan);
  Apply(removed);
  CkptRecord r;
  EXPECT_EQ(h_.Retire(ns_, 5000, milliseconds(1000), &r), 1u);
  EXPECT_EQ(r.del, std::vector<uint64_t>{1});
  // Its replicas and the writer's whole-file copy go.
  ASSERT_EQ(r.drops_add.size(), 3u);
  EXPECT_TRUE(r.drops_add[2].whole);
  EXPECT_EQ(r.drops_add[2].node, "a");
  // Never committed: nothing to keep.
  CkptNode empty;
  empty.id = 2;
  CkptRecord gone;
  CkptHolders::Orphan(&gone, empty, 1000);
  EXPECT_EQ(gone.del, std::vector<uint64_t>{2});
}

TEST_F(CkptHoldersTest, WorkHandsOutDropsInPagesAndSkipsLiveCopies) {
  Put(File(1, 1, "a", "b"));
  CkptRecord r{.drops_add = {
                   CkptDrop{.seq = 1, .node = "b", .id = 1, .gen = 1, .index = 0, .checksum = 11},  // live
                   CkptDrop{.seq = 2, .node = "b", .id = 1, .gen = 1, .index = 1, .checksum = 99},
                   CkptDrop{.seq = 3, .node = "b", .id = 1, .gen = 0, .whole = true},
               }};
  h_.ApplyDrops(r);
  proto::CkptWorkReply reply;
  h_.FillWork(ns_, "b", false, 100, /*drop_page=*/2, &reply);
  ASSERT_EQ(reply.drop.size(), 1u);
  EXPECT_EQ(reply.drop[0].checksum, 99u);
  EXPECT_EQ(reply.drop_files.size(), 1u);
  EXPECT_EQ(reply.drop_seq, 3u);
  EXPECT_EQ(reply.keep_files, std::vector<uint64_t>{1});
  EXPECT_EQ(h_.DropsDone("b", 2), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(h_.DropsDone("a", 3).empty());
}

TEST_F(CkptHoldersTest, RereplicateGivesLostChunksNewHoldersAndTheirListConfirms) {
  Put(File(1, 1, "a", "b"));
  Put(File(2, 1, "a", "c"));
  const std::set<std::pair<uint64_t, uint64_t>> undrained = {{1, 1}, {2, 2}};
  CkptRecord r;
  CkptHolders::Given given = CkptHolders::Rereplicate(ns_, undrained, {"a", "c", "d", "e"}, {"b"}, {"e"}, &r);
  EXPECT_EQ(given.files, 1u);
  EXPECT_EQ(given.chunks, 2u);
  ASSERT_EQ(r.put.size(), 1u);
  for (const auto& holders : r.put[0].replicas) {
    ASSERT_EQ(holders.size(), 2u);
    EXPECT_EQ(holders[0], "b");  // the lost node stays listed: it may come back
    EXPECT_TRUE(holders[1] == "c" || holders[1] == "d") << holders[1];
  }
  EXPECT_EQ(r.put[0].unconfirmed.size(), 2u);
  Apply(r);
  h_.RebuildDue(given.nodes);
  const std::string node = *given.nodes.begin();
  proto::CkptWorkReply reply;
  h_.FillWork(ns_, node, false, 100, 100, &reply);
  EXPECT_EQ(reply.rebuild_seq, 100u);
  EXPECT_FALSE(reply.rebuild.empty());
  EXPECT_EQ(h_.Listed(node, 99), nullptr);
  const std::set<CkptHolders::ChunkOf>* listed = h_.Listed(node, 100);
  ASSERT_NE(listed, nullptr);
  CkptRecord confirm;
  CkptHolders::StageConfirm(ns_, node, *listed, &confirm);
  Apply(confirm);
  h_.ForgetListed(node);
  if (given.nodes.size() == 1) {
    EXPECT_TRUE(ns_.Find(1)->unconfirmed.empty());
  }
}

TEST_F(CkptHoldersTest, RebuildListsGoOutAPageAtATime) {
  Put(File(1, 1, "a", "b"));
  Put(File(2, 1, "a", "b"));
  proto::CkptWorkReply first;
  h_.FillWork(ns_, "b", /*rebuild=*/true, /*rebuild_page=*/3, 100, &first);
  EXPECT_EQ(first.rebuild.size(), 3u);
  proto::CkptWorkReply second;
  h_.FillWork(ns_, "b", /*rebuild=*/false, 3, 100, &second);  // the rest, unasked
  ASSERT_EQ(second.rebuild.size(), 1u);
  EXPECT_EQ(second.rebuild[0].id, 2u);
  EXPECT_EQ(second.rebuild[0].index, 1u);
  EXPECT_GT(second.rebuild_seq, first.rebuild_seq);
  proto::CkptWorkReply third;
  h_.FillWork(ns_, "b", false, 3, 100, &third);
  EXPECT_TRUE(third.rebuild.empty());
  EXPECT_EQ(third.rebuild_seq, 0u);
}

TEST_F(CkptHoldersTest, ReleaseKeepsTheNewestCheckpointsAndMarkers) {
  CkptNode job;
  job.id = 10;
  job.name = "job";
  job.is_dir = true;
  ns_.Put(job);
  for (uint64_t i = 1; i <= 3; ++i) {
    CkptNode f = File(i, 1, "a", "b");
    f.parent = 10;
    f.level = uint8_t(CkptLevel::kP);
    ns_.Put(f);
  }
  CkptNode marker = File(4, 1, "a", "b");
  marker.parent = 10;
  marker.name = "latest";
  marker.commit_seq = 0;
  marker.level = uint8_t(CkptLevel::kP);
  ns_.Put(marker);
  CkptRecord r;
  CkptHolders::Release(ns_, 10, /*keep_last=*/2, [](const std::string& name) { return name == "latest"; }, 0,
                       milliseconds(1000), &r);
  ASSERT_EQ(r.put.size(), 1u);
  EXPECT_EQ(r.put[0].id, 1u);  // the oldest commit
  EXPECT_TRUE(r.put[0].released);
  EXPECT_EQ(r.put[0].writer, "");
}

TEST_F(CkptHoldersTest, CheckReuseRefusesCopiesTheCurrentGenerationLacks) {
  const CkptNode n = File(1, 1, "a", "b");
  proto::CkptCommit req{.id = 1, .gen = 2};
  req.checksums = {11, 99};
  req.chunk_gens = {1, 2};
  req.replicas = {{"b"}, {"c"}};
  EXPECT_TRUE(CkptHolders::CheckReuse(n, req).ok());
  req.replicas[0] = {"c"};
  EXPECT_EQ(CkptHolders::CheckReuse(n, req).code(), Code::kStale);
  req.replicas[0] = {"b"};
  req.checksums[0] = 12;
  EXPECT_EQ(CkptHolders::CheckReuse(n, req).code(), Code::kStale);
}

}  // namespace
}  // namespace hoard
