#include "checkpoint/ckpt_namespace.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

CkptNode Dir(uint64_t id, uint64_t parent, const std::string& name) {
  CkptNode n;
  n.id = id;
  n.parent = parent;
  n.name = name;
  n.is_dir = true;
  return n;
}

CkptNode File(uint64_t id, uint64_t parent, const std::string& name) {
  CkptNode n;
  n.id = id;
  n.parent = parent;
  n.name = name;
  return n;
}

class CkptNamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_.Put(Dir(1, 0, "job"));
    ns_.Put(Dir(2, 1, "iter_1"));
    ns_.Put(File(3, 2, "a.bin"));
    ns_.Put(File(4, 1, "latest"));
  }
  CkptNamespace ns_;
};

TEST_F(CkptNamespaceTest, ResolvesPathsAsPosixDoes) {
  ASSERT_TRUE(ns_.Resolve("").ok());
  EXPECT_EQ((*ns_.Resolve(""))->id, 0u);
  EXPECT_TRUE((*ns_.Resolve(""))->is_dir);
  EXPECT_EQ((*ns_.Resolve("job/iter_1/a.bin"))->id, 3u);
  EXPECT_EQ(ns_.Resolve("job/none").status().code(), Code::kNotFound);
  EXPECT_EQ(ns_.Resolve("job/latest/x").status().code(), Code::kNotDirectory);
  EXPECT_EQ(ns_.Resolve("job/../x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*ns_.ResolveParent("job/iter_1/new"))->id, 2u);
  EXPECT_EQ(ns_.ResolveParent("").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ns_.ResolveParent("job/latest/x").status().code(), Code::kNotDirectory);
}

TEST_F(CkptNamespaceTest, DerivesPathsJobsAndLinks) {
  EXPECT_EQ(ns_.Path(3), "job/iter_1/a.bin");
  EXPECT_EQ(ns_.JobOf(3), 1u);
  EXPECT_EQ(ns_.JobOf(1), 1u);
  EXPECT_EQ(ns_.JobOf(0), 0u);
  EXPECT_EQ(ns_.CheckpointOf(3), 2u) << "a.bin is in checkpoint iter_1";
  EXPECT_EQ(ns_.CheckpointOf(2), 2u);
  EXPECT_EQ(ns_.CheckpointOf(4), 4u) << "a file directly in the job is a checkpoint of its own";
  EXPECT_EQ(ns_.CheckpointOf(1), 0u) << "a job is no checkpoint";
  EXPECT_EQ(ns_.CheckpointOf(0), 0u);
  EXPECT_TRUE(ns_.InSubtree(3, 1));
  EXPECT_TRUE(ns_.InSubtree(3, 0));
  EXPECT_FALSE(ns_.InSubtree(4, 2));
  EXPECT_EQ(ns_.Nlink(*ns_.Find(1)), 3u);  // 2 + iter_1
  EXPECT_EQ(ns_.Nlink(*ns_.Find(2)), 2u);
  EXPECT_EQ(ns_.Nlink(*ns_.Find(3)), 1u);
  EXPECT_EQ(ns_.ToEntry(*ns_.Find(3)).path, "job/iter_1/a.bin");
  std::vector<uint64_t> files;
  ns_.ForEachFile(1, [&](const CkptNode& f) { files.push_back(f.id); });
  EXPECT_EQ(files, (std::vector<uint64_t>{3, 4}));
  EXPECT_TRUE(ns_.HasChildren(2));
  EXPECT_FALSE(ns_.HasChildren(3));
}

TEST_F(CkptNamespaceTest, PutMovesAndKeepsANameTakenInTheSameRecord) {
  // A rename over a file, as one record applies it: the new entry takes the
  // name first, then the old one leaves it (as an orphan).
  CkptNode moved = *ns_.Find(3);
  moved.parent = 1;
  moved.name = "latest";
  ns_.Put(moved);
  CkptNode gone = File(4, 0, "");
  gone.orphan = true;
  ns_.Put(gone);
  EXPECT_EQ((*ns_.Resolve("job/latest"))->id, 3u);
  EXPECT_FALSE(ns_.HasChildren(2));
  EXPECT_EQ(ns_.Path(4), "");
  // Moving a directory updates the parents' link counts.
  CkptNode dir = *ns_.Find(2);
  dir.parent = 0;
  ns_.Put(dir);
  EXPECT_EQ(ns_.Nlink(*ns_.Find(1)), 2u);
  ns_.Del(2);
  EXPECT_EQ(ns_.Resolve("iter_1").status().code(), Code::kNotFound);
}

TEST_F(CkptNamespaceTest, TouchStagesTheEntryAndKeepsTheRootInMemory) {
  CkptRecord r;
  ns_.Touch(&r, 2, 5000, /*mtime=*/true);
  ns_.Touch(&r, 2, 6000, /*mtime=*/false);
  ASSERT_EQ(r.put.size(), 1u);
  EXPECT_EQ(r.put[0].ctime_ns, 6000);
  EXPECT_EQ(r.put[0].mtime_ns, 5000);
  EXPECT_EQ(ns_.Find(2)->ctime_ns, 0);  // not applied
  ns_.Touch(&r, 0, 7000, /*mtime=*/true);
  EXPECT_EQ(r.put.size(), 1u);
  EXPECT_EQ(ns_.ToEntry(**ns_.Resolve("")).mtime_ns, 7000);
}

TEST_F(CkptNamespaceTest, CheckLoadedRefusesWhatNoOperationsBuild) {
  ASSERT_TRUE(ns_.CheckLoaded().ok());
  EXPECT_EQ(ns_.next_id(), 5u);
  CkptNamespace under_file;
  under_file.Put(File(1, 0, "f"));
  under_file.Put(File(2, 1, "g"));
  EXPECT_EQ(under_file.CheckLoaded().code(), Code::kCorruption);
  CkptNamespace cycle;
  cycle.Put(Dir(1, 2, "a"));
  cycle.Put(Dir(2, 1, "b"));
  EXPECT_EQ(cycle.CheckLoaded().code(), Code::kCorruption);
  CkptNamespace unsafe;
  unsafe.Put(File(1, 0, ".."));
  EXPECT_EQ(unsafe.CheckLoaded().code(), Code::kCorruption);
}

}  // namespace
}  // namespace hoard
