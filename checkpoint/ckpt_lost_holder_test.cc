// A checkpoint replica holder that dies and stays down before the drain, on a
// real kernel FUSE mount over an in-process cluster of three node agents
// (nothing reaches the origin: the coordinator has no checkpoint origin, so
// the file stays below P). Its chunks get a new holder, which copies them from
// the writer (checkpoint/ckpt_copies.cc), so the file is on K=2 nodes again,
// and it reads back whole after the writer is gone too.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "store/replica_store.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/testing.h"
#include "testing/test_mount.h"
#include "testing/test_cluster.h"

namespace hoard::fuse {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
constexpr uint64_t kCs = 4u << 20;  // the checkpoint chunk size

TEST(CkptLostHolderTest, ALostHoldersChunksAreCopiedToAnotherNodeBeforeTheDrain) {
  hoard::testing::TempDir tmp("hoard-lost-holder");
  const std::string dir = tmp.path();
  hoard::testing::TestCluster cluster(dir, "mem://o");
  ASSERT_TRUE(cluster
                  .Start([](Coordinator::Options* o) {
                    o->down_after = 2s;  // over twice the liveness interval (500 ms)
                    o->ckpt.lost_after = 3s;
                  })
                  .ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 3);
  ASSERT_FALSE(m.mnt.empty());
  const std::string& mnt = m.mnt;

  const std::string data = hoard::testing::PseudoRandomBytes(6 * kCs + 1000, 31);
  ASSERT_TRUE(WriteFileAtomic(JoinPath(mnt, "checkpoints/job/model.pt"), data).ok());
  CkptTable& table = cluster.coordinator().checkpoints();
  Result<proto::CkptEntry> e = table.Lookup("job/model.pt");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->level, uint8_t(proto::CkptLevel::kR));
  ASSERT_EQ(e->replicas.size(), 7u);
  const std::string lost = e->replicas[0].at(0);
  const std::string other = lost == "node2" ? "node3" : "node2";
  std::vector<uint32_t> moved;
  for (uint32_t i = 0; i < 7; ++i) {
    if (e->replicas[i] == std::vector<std::string>{lost}) moved.push_back(i);
  }
  ASSERT_FALSE(moved.empty());

  // The copy on `other` of chunk i, checked against the file's bytes.
  auto held = [&](uint32_t i) {
    Result<proto::CkptEntry> now = table.Lookup("job/model.pt");
    const std::string_view want = std::string_view(data).substr(i * kCs, kCs);
    if (!now.ok()) return false;
    Result<std::string> got = ReplicaStore::ReadCopy(JoinPath(dir, other + "/store/ckpt"), now->id, now->gen, i,
                                                     now->checksums[i], kCs, want.size());
    return got.ok() && *got == want;
  };
  EXPECT_FALSE(held(moved[0])) << "before the loss, only " << lost << " has chunk " << moved[0];
  // The level users see: R with both copies up, L while a chunk has one, R
  // again once the new holder has confirmed its copies.
  const std::string path = JoinPath(mnt, "checkpoints/job/model.pt");
  auto state = [&] {
    char v[8] = {};
    const ssize_t n = ::getxattr(path.c_str(), "user.hoard.state", v, sizeof v);
    return n > 0 ? std::string(v, static_cast<size_t>(n)) : std::string("error");
  };
  EXPECT_EQ(state(), "R");
  cluster.StopAgent(lost);
  EXPECT_TRUE(Eventually([&] { return state() == "L"; }, 10s)) << "still " << state();
  for (uint32_t i : moved) {
    EXPECT_TRUE(Eventually([&] { return held(i); }, 20s)) << "chunk " << i << " was not copied to " << other;
    const std::vector<std::string> reps = table.Lookup("job/model.pt")->replicas[i];
    EXPECT_EQ(reps, (std::vector<std::string>{lost, other})) << "chunk " << i;
  }
  // Every chunk is on `other` now: the file outlives its writer too.
  for (uint32_t i = 0; i < 7; ++i) EXPECT_TRUE(held(i)) << "chunk " << i;
  EXPECT_TRUE(Eventually([&] { return state() == "R"; }, 10s)) << "still " << state();
  m.mount.reset();
  m.fs.reset();
  cluster.StopAgent("node1");
  auto reader_fs = std::make_unique<HoardFs>(TestMountOptions(cluster, "reader-cache"));
  auto reader = TestMount::Start(reader_fs.get(), JoinPath(dir, "mnt2"));
  ASSERT_NE(reader, nullptr);
  Result<std::string> back = ReadFile(JoinPath(dir, "mnt2/checkpoints/job/model.pt"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data) << "read back from " << other << " alone";
}

}  // namespace
}  // namespace hoard::fuse
