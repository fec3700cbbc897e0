// Write-behind of checkpoint chunks (checkpoint/ckpt_write_behind.h), on a real
// kernel FUSE mount over an in-process cluster of three node agents: chunks a
// writer finished reach their holders before it syncs, the commit does not
// send them again, and a chunk changed after it was sent is committed (and
// held) with its new bytes, never the old ones.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <filesystem>

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

class WriteBehindTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    ASSERT_TRUE(cluster_->Start().ok());
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(cluster_->StartAgent("node" + std::to_string(i)).ok());
    ASSERT_TRUE(Eventually([&] { return cluster_->coordinator().GetClusterMap().nodes.size() == 3; }));
    HoardFs::Options options = TestMountOptions(*cluster_);
    options.node_name = "node1";
    fs_ = std::make_unique<HoardFs>(options);
    mnt_ = JoinPath(dir_, "mnt");
    mount_ = TestMount::Start(fs_.get(), mnt_);
    ASSERT_NE(mount_, nullptr) << "cannot start the mount, or mount FUSE here";
    ASSERT_TRUE(Eventually([&] { return ::mkdir(JoinPath(mnt_, "checkpoints/wb").c_str(), 0755) == 0; }));
  }

  void TearDown() override {
    mount_.reset();
    fs_.reset();
    cluster_.reset();
  }

  const Committer& committer() { return fs_->ckpt().committer(); }
  std::string ReplicaDir(const std::string& node) { return JoinPath(dir_, node + "/store/ckpt"); }

  // Whether some other node holds chunk `index` of generation `gen` of `id`.
  bool Held(uint64_t id, uint64_t gen, uint32_t index) {
    const std::string prefix = std::to_string(id) + "-" + std::to_string(gen) + "-" + std::to_string(index) + "-";
    for (const char* n : {"node2", "node3"}) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(JoinPath(ReplicaDir(n), "chunks"), ec)) {
        if (e.path().filename().string().starts_with(prefix)) return true;
      }
    }
    return false;
  }

  // The committed entry of `path` has `want`'s size and checksums, and every
  // holder it names serves exactly `want`'s bytes of each chunk.
  void ExpectCommitted(const std::string& path, const std::string& want) {
    Result<proto::CkptEntry> e = cluster_->coordinator().checkpoints().Lookup(path);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_EQ(e->size, want.size());
    ASSERT_EQ(e->checksums.size(), (want.size() + kCs - 1) / kCs);
    ASSERT_EQ(e->replicas.size(), e->checksums.size());
    for (uint32_t i = 0; i < e->checksums.size(); ++i) {
      const std::string_view bytes = std::string_view(want).substr(i * kCs, kCs);
      EXPECT_EQ(e->checksums[i], Checksum64(bytes.data(), bytes.size())) << "chunk " << i;
      ASSERT_EQ(e->replicas[i].size(), 1u) << "chunk " << i << ": K=2, one copy besides the writer's";
      Result<std::string> got = ReplicaStore::ReadCopy(ReplicaDir(e->replicas[i][0]), e->id, e->gen, i,
                                                       e->checksums[i], kCs, bytes.size());
      ASSERT_TRUE(got.ok()) << "chunk " << i << " on " << e->replicas[i][0] << ": " << got.status().ToString();
      EXPECT_TRUE(*got == bytes) << "chunk " << i << " on " << e->replicas[i][0];
    }
  }

  uint64_t IdOf(const std::string& path) {
    Result<proto::CkptEntry> e = cluster_->coordinator().checkpoints().Lookup(path);
    return e.ok() ? e->id : 0;
  }

  hoard::testing::TempDir tmp_{"hoard-write-behind"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<hoard::testing::TestCluster> cluster_ =
      std::make_unique<hoard::testing::TestCluster>(dir_, "mem://o");
  std::string mnt_;
  std::unique_ptr<HoardFs> fs_;
  std::unique_ptr<TestMount> mount_;
};

TEST_F(WriteBehindTest, FinishedChunksReachTheirHoldersBeforeTheWriterSyncs) {
  const std::string data = hoard::testing::PseudoRandomBytes(6 * kCs, 11);
  UniqueFd fd(::open(JoinPath(mnt_, "checkpoints/wb/a.bin").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_TRUE(PwriteAll(fd.get(), data.data(), data.size(), 0).ok());
  const uint64_t id = IdOf("wb/a.bin");
  ASSERT_NE(id, 0u);
  // No fsync yet: every chunk (the last one is full too) is already held.
  for (uint32_t i = 0; i < 6; ++i) ASSERT_TRUE(Eventually([&] { return Held(id, 1, i); }, 10s)) << "chunk " << i;
  ASSERT_EQ(::fsync(fd.get()), 0) << std::strerror(errno);
  EXPECT_EQ(committer().chunks_sent_ahead(), 6u);
  EXPECT_EQ(committer().chunks_sent_at_commit(), 0u);
  ASSERT_EQ(::close(fd.Release()), 0);
  ExpectCommitted("wb/a.bin", data);

  // The next generation: a rewrite of the whole file goes the same way.
  const std::string next = hoard::testing::PseudoRandomBytes(6 * kCs, 12);
  fd = UniqueFd(::open(JoinPath(mnt_, "checkpoints/wb/a.bin").c_str(), O_WRONLY | O_TRUNC));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_TRUE(PwriteAll(fd.get(), next.data(), next.size(), 0).ok());
  for (uint32_t i = 0; i < 6; ++i) ASSERT_TRUE(Eventually([&] { return Held(id, 2, i); }, 10s)) << "chunk " << i;
  ASSERT_EQ(::close(fd.Release()), 0);
  ExpectCommitted("wb/a.bin", next);
}

TEST_F(WriteBehindTest, AChunkChangedAfterItWasSentIsCommittedWithItsNewBytes) {
  std::string data = hoard::testing::PseudoRandomBytes(4 * kCs, 21);
  UniqueFd fd(::open(JoinPath(mnt_, "checkpoints/wb/b.bin").c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_TRUE(PwriteAll(fd.get(), data.data(), data.size(), 0).ok());
  const uint64_t id = IdOf("wb/b.bin");
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(Eventually([&] { return Held(id, 1, i); }, 10s)) << "chunk " << i;
  // Chunk 1 changes in its middle, and the file ends halfway through chunk 3.
  const std::string patch = hoard::testing::PseudoRandomBytes(5000, 22);
  ASSERT_TRUE(PwriteAll(fd.get(), patch.data(), patch.size(), off_t(kCs + 12345)).ok());
  data.replace(kCs + 12345, patch.size(), patch);
  ASSERT_EQ(::ftruncate(fd.get(), off_t(3 * kCs + kCs / 2)), 0) << std::strerror(errno);
  data.resize(3 * kCs + kCs / 2);
  ASSERT_EQ(::fsync(fd.get()), 0) << std::strerror(errno);
  EXPECT_EQ(committer().chunks_sent_ahead(), 2u) << "chunks 0 and 2";
  EXPECT_EQ(committer().chunks_sent_at_commit(), 2u) << "chunks 1 and 3";
  ASSERT_EQ(::close(fd.Release()), 0);
  ExpectCommitted("wb/b.bin", data);
  // And through the mount.
  Result<std::string> back = ReadFile(JoinPath(mnt_, "checkpoints/wb/b.bin"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
}

// A failed fdatasync is not forgotten: the kernel reports a writeback error
// once, so a retry would "succeed" over bytes that may be lost. Every later
// commit of the file fails, reopened or not, until it is written again from
// the start.
TEST_F(WriteBehindTest, AFailedSyncFailsEveryCommitUntilTheFileIsWrittenAgain) {
  const std::string path = JoinPath(mnt_, "checkpoints/wb/sync.pt");
  const std::string data = hoard::testing::PseudoRandomBytes(kCs + 100, 5);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_TRUE(PwriteAll(fd.get(), data.data(), data.size(), 0).ok());
  fs_->ckpt().TEST_committer().TEST_FailNextSync(EIO);
  EXPECT_EQ(::fsync(fd.get()), -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(::fsync(fd.get()), -1) << "a retry committed what the failed sync may have lost";
  EXPECT_NE(::close(fd.Release()), 0) << "close commits too";
  fd = UniqueFd(::open(path.c_str(), O_WRONLY));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  EXPECT_EQ(::fsync(fd.get()), -1) << "reopened, the file is still suspect";
  (void)::close(fd.Release());
  EXPECT_EQ(cluster_->coordinator().checkpoints().Lookup("wb/sync.pt")->gen, 0u) << "nothing was committed";

  fd = UniqueFd(::open(path.c_str(), O_WRONLY | O_TRUNC));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_TRUE(PwriteAll(fd.get(), data.data(), data.size(), 0).ok());
  EXPECT_EQ(::fsync(fd.get()), 0) << std::strerror(errno);
  EXPECT_EQ(::close(fd.Release()), 0);
  ExpectCommitted("wb/sync.pt", data);
}

TEST(SentChunksTest, OnlySendsOfUnchangedChunksForTheNextGenerationCount) {
  SentChunks s(/*next_gen=*/5);
  auto sent = [](uint64_t checksum) { return SentChunks::Sent{.checksum = checksum, .length = kCs, .holders = {"n2"}}; };
  EXPECT_FALSE(s.Claim(0, 4).has_value()) << "not the next generation";
  std::optional<SentChunks::Ticket> a = s.Claim(0, 5), b = s.Claim(1, 5), c = s.Claim(2, 5);
  ASSERT_TRUE(a && b && c);
  s.Touch(kCs, kCs + 10, 1);  // a write into chunk 1 while it is being sent
  s.Finish(*a, sent(100));
  s.Finish(*b, sent(101));
  s.Finish(*c, std::nullopt);  // a send that failed
  EXPECT_FALSE(s.Claim(0, 5).has_value()) << "sent at its version already";
  std::optional<SentChunks::Ticket> b2 = s.Claim(1, 5);
  ASSERT_TRUE(b2.has_value()) << "changed since: sent again";
  s.Finish(*b2, sent(201));

  std::unordered_map<uint32_t, SentChunks::Sent> got = s.BeginCommit(5);
  EXPECT_FALSE(s.Claim(3, 5).has_value()) << "no sends while a commit runs";
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.at(0).checksum, 100u);
  EXPECT_EQ(got.at(1).checksum, 201u);
  s.EndCommit(5);  // failed: the records stay
  s.Truncate(kCs, kCs / 2);  // chunk 0 (and all after it) changed
  EXPECT_TRUE(s.BeginCommit(5).empty());
  s.EndCommit(6);  // committed: the next generation starts with nothing sent
  EXPECT_EQ(s.next_gen(), 6u);
  EXPECT_TRUE(s.BeginCommit(6).empty());
  s.EndCommit(6);
}

TEST(SentChunksTest, ACommitWaitsForTheSendsInFlight) {
  SentChunks s(1);
  std::optional<SentChunks::Ticket> t = s.Claim(0, 1);
  ASSERT_TRUE(t.has_value());
  std::atomic<bool> finished{false};
  std::thread sender([&] {
    // Claim refuses new sends once BeginCommit has begun, which then waits
    // for `t`: finish it only from there.
    while (std::optional<SentChunks::Ticket> probe = s.Claim(1, 1)) s.Finish(*probe, std::nullopt);
    finished = true;
    s.Finish(*t, SentChunks::Sent{.checksum = 7, .length = kCs, .holders = {"n3"}});
  });
  std::unordered_map<uint32_t, SentChunks::Sent> got = s.BeginCommit(1);
  EXPECT_TRUE(finished.load());
  ASSERT_EQ(got.size(), 1u) << "the send that was in flight is used";
  EXPECT_EQ(got.at(0).checksum, 7u);
  s.EndCommit(2);
  sender.join();
}

}  // namespace
}  // namespace hoard::fuse
