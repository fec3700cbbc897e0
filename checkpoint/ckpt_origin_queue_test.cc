#include "checkpoint/ckpt_origin_queue.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using proto::CkptLevel;

CkptNode Entry(uint64_t id, uint64_t parent, const std::string& name, bool dir = false) {
  CkptNode n;
  n.id = id;
  n.parent = parent;
  n.name = name;
  n.is_dir = dir;
  return n;
}

// Committed at `commit_seq`; `p`: published and at P.
CkptNode Committed(uint64_t id, uint64_t parent, const std::string& name, uint64_t commit_seq, bool p) {
  CkptNode n = Entry(id, parent, name);
  n.gen = 1;
  n.commit_seq = commit_seq;
  if (p) {
    n.published_gen = 1;
    n.level = uint8_t(CkptLevel::kP);
  }
  return n;
}

class CkptOriginQueueTest : public ::testing::Test {
 protected:
  void Put(const CkptNode& n) {
    if (const CkptNode* was = ns_.Find(n.id); was != nullptr) q_.Index(*was, false);
    ns_.Put(n);
    q_.Index(n, true);
  }
  CkptNamespace ns_;
  CkptOriginQueue q_{{".metadata", "latest"}};
};

TEST_F(CkptOriginQueueTest, QueuesInOrderAcrossRecords) {
  CkptRecord r;
  q_.Queue(&r, OriginOp::kUnlink, "", "a");
  q_.Queue(&r, OriginOp::kRename, "b", "c");
  EXPECT_EQ(r.ops_add[0].seq, 1u);
  EXPECT_EQ(r.ops_add[1].seq, 2u);
  r.next_op_seq = 3;
  q_.Apply(r);
  EXPECT_EQ(q_.Next()->path, "a");
  CkptRecord next;
  q_.Queue(&next, OriginOp::kRmdir, "", "d");
  EXPECT_EQ(next.ops_add[0].seq, 3u);
  q_.Apply(CkptRecord{.ops_done = {1}});
  EXPECT_EQ(q_.Next()->seq, 2u);
  EXPECT_EQ(q_.Find(1), nullptr);
}

TEST_F(CkptOriginQueueTest, PublishMarksTheFileAndItsDirectoriesOnTheOrigin) {
  Put(Entry(1, 0, "job", true));
  Put(Entry(2, 1, "iter", true));
  CkptNode f = Committed(3, 2, "a.bin", 1, false);
  f.uploaded_gen = 1;
  f.uploaded_tmp = CkptOriginQueue::StagingPath(3, 1, "node-1");
  Put(f);
  EXPECT_EQ(q_.held(), std::set<uint64_t>{3});
  CkptRecord r;
  q_.QueuePublish(ns_, &r, f);
  ASSERT_EQ(r.ops_add.size(), 1u);
  EXPECT_EQ(r.ops_add[0].kind, OriginOp::kPublish);
  EXPECT_EQ(r.ops_add[0].from, ".hoard-staging/3-1-node-1");
  EXPECT_EQ(r.ops_add[0].path, "job/iter/a.bin");
  ASSERT_EQ(r.put.size(), 3u);
  for (const CkptNode& n : r.put) EXPECT_TRUE(n.on_origin) << n.name;
  EXPECT_EQ(r.put[0].published_gen, 1u);
  EXPECT_EQ(r.put[0].uploaded_gen, 0u);
  EXPECT_EQ(CkptOriginQueue::StagingNode(r.ops_add[0].from), "node-1");
  EXPECT_EQ(CkptOriginQueue::StagingNode("job/a.bin"), "");
}

TEST_F(CkptOriginQueueTest, DropUploadQueuesItsDeletion) {
  CkptNode f = Committed(1, 0, "f", 1, false);
  CkptRecord r;
  q_.DropUpload(&r, &f);
  EXPECT_TRUE(r.ops_add.empty());
  f.uploaded_gen = 1;
  f.uploaded_tmp = ".hoard-staging/1-1-a";
  q_.DropUpload(&r, &f);
  ASSERT_EQ(r.ops_add.size(), 1u);
  EXPECT_EQ(r.ops_add[0].kind, OriginOp::kUnlink);
  EXPECT_EQ(r.ops_add[0].path, ".hoard-staging/1-1-a");
  EXPECT_EQ(f.uploaded_gen, 0u);
}

TEST_F(CkptOriginQueueTest, AMarkerWaitsForWhatWasCommittedBeforeIt) {
  Put(Entry(1, 0, "job", true));
  Put(Entry(2, 1, "iter", true));
  Put(Committed(3, 2, "a.bin", 1, false));
  CkptNode marker = Committed(4, 1, "latest", 2, false);
  marker.uploaded_gen = 1;
  marker.uploaded_tmp = ".hoard-staging/4-1-a";
  Put(marker);
  Put(Committed(5, 2, "b.bin", 3, false));  // committed after the marker: not waited for
  Put(Committed(6, 1, ".metadata", 1, false));  // another marker: not waited for
  EXPECT_TRUE(q_.IsMarker("latest"));
  EXPECT_FALSE(q_.IsMarker("a.bin"));
  EXPECT_FALSE(q_.MarkerReady(ns_, marker));
  CkptRecord none;
  q_.QueueReadyMarkers(ns_, &none);
  EXPECT_TRUE(none.ops_add.empty());
  Put(Committed(3, 2, "a.bin", 1, true));
  EXPECT_TRUE(q_.MarkerReady(ns_, marker));
  CkptRecord r;
  q_.QueueReadyMarkers(ns_, &r);
  ASSERT_EQ(r.ops_add.size(), 1u);
  EXPECT_EQ(r.ops_add[0].path, "job/latest");
}

TEST_F(CkptOriginQueueTest, CheckLoadedRefusesUnsafeOperations) {
  q_.Apply(CkptRecord{.ops_add = {OriginOp{.seq = 4, .kind = OriginOp::kUnlink, .path = "a"}}});
  ASSERT_TRUE(q_.CheckLoaded().ok());
  EXPECT_EQ(q_.next_seq(), 5u);
  q_.Apply(CkptRecord{.ops_add = {OriginOp{.seq = 5, .kind = OriginOp::kRename, .from = "../x", .path = "a"}}});
  EXPECT_EQ(q_.CheckLoaded().code(), Code::kCorruption);
}

}  // namespace
}  // namespace hoard
