// The commit's K comes from the coordinator (--ckpt-replicas, carried by the
// cluster map), on a real kernel FUSE mount over an in-process cluster.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "checkpoint/replica_store.h"
#include "common/file_util.h"
#include "common/testing.h"
#include "fuse/hoard_fs.h"
#include "fuse/test_mount.h"
#include "node/test_cluster.h"

namespace hoard::fuse {
namespace {

constexpr uint64_t kCs = 4u << 20;  // the checkpoint chunk size

TEST(CkptCommitTest, EveryChunkIsOnTheCoordinatorsKNodes) {
  hoard::testing::TempDir tmp("hoard-ckpt-k");
  const std::string dir = tmp.path();
  hoard::testing::TestCluster cluster(dir, "mem://o");
  ASSERT_TRUE(cluster.Start([](Coordinator::Options* o) { o->ckpt.replicas = 3; }).ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 4);
  ASSERT_FALSE(m.mnt.empty());
  const std::string& mnt = m.mnt;

  const std::string data = hoard::testing::PseudoRandomBytes(2 * kCs + 4321, 7);
  ASSERT_TRUE(WriteFileAtomic(JoinPath(mnt, "checkpoints/job/model.pt"), data).ok());
  Result<proto::CkptEntry> e = cluster.coordinator().checkpoints().Lookup("job/model.pt");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->level, uint8_t(proto::CkptLevel::kR));
  EXPECT_EQ(e->replicas_wanted, 3u);
  ASSERT_EQ(e->replicas.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    std::vector<std::string> holders = e->replicas[i];
    std::sort(holders.begin(), holders.end());
    ASSERT_EQ(holders.size(), 2u) << "chunk " << i;
    EXPECT_NE(holders[0], holders[1]) << "chunk " << i;
    const std::string_view want = std::string_view(data).substr(i * kCs, kCs);
    for (const std::string& h : holders) {
      EXPECT_NE(h, "node1") << "the writer holds its own copy already";
      Result<std::string> got = ReplicaStore::ReadCopy(JoinPath(dir, h + "/store/ckpt"), e->id, e->gen, i,
                                                       e->checksums[i], kCs, want.size());
      ASSERT_TRUE(got.ok()) << h << " chunk " << i << ": " << got.status().ToString();
      EXPECT_TRUE(*got == want) << h << " chunk " << i;
    }
  }
}

}  // namespace
}  // namespace hoard::fuse
