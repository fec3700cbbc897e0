// Checkpoint commits and opens for writing on a real kernel FUSE mount over
// an in-process cluster: K comes from the coordinator (--ckpt-replicas,
// carried by the cluster map); two first opens of one file do not overwrite
// each other's bytes; a released file opened for writing is kept again;
// another node's mount that looked at a file while it was written reads all
// of it once the writer closed it (close-to-open, as NFS gives); a handle
// open for writing skips the mount's page cache yet can be mapped shared;
// replicas go only to nodes that are up.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/ckpt_commit.h"
#include "cluster/cluster_view.h"
#include "store/replica_store.h"
#include "common/file_util.h"
#include "common/testing.h"
#include "testing/test_mount.h"
#include "testing/test_cluster.h"

namespace hoard::fuse {
namespace {

constexpr uint64_t kCs = 4u << 20;  // the checkpoint chunk size

// A node down but held (within the coordinator's --out-after) keeps its
// dataset placement, but gets no checkpoint replicas: it cannot store them
// while it is down. Nor does one that is out.
TEST(CkptCommitTest, ReplicasGoOnlyToNodesThatAreUp) {
  proto::ClusterMap map;
  map.nodes = {{.name = "self", .up = true},
               {.name = "up", .up = true},
               {.name = "held", .up = false, .down_since_unix = 1, .held = true},
               {.name = "out", .up = false, .down_since_unix = 1}};
  ASSERT_GT(proto::PlacementWeight(map.nodes[2]), 0);
  const ClusterView view(map, {}, "self");
  for (uint32_t index = 0; index < 16; ++index) {
    const std::vector<uint32_t> candidates = Committer::ReplicaCandidates(view, 7, index, "self");
    ASSERT_EQ(candidates.size(), 1u);
    EXPECT_EQ(view.node(candidates[0]).name, "up");
  }
}

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

// Two handles open one committed file for writing at once, the first without
// O_TRUNC. While the first open is still getting the file ready (checking or
// copying in the committed bytes), the second truncates it and writes. The
// first open must not copy the old bytes back over those writes: what is
// committed at close is exactly what the second handle wrote.
TEST(CkptCommitTest, ASecondFirstOpenDoesNotCopyOldBytesOverTheFirstHandlesWrites) {
  using namespace std::chrono_literals;
  hoard::testing::TempDir tmp("hoard-ckpt-open");
  hoard::testing::TestCluster cluster(tmp.path(), "mem://o");
  ASSERT_TRUE(cluster.Start().ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 3);
  ASSERT_FALSE(m.mnt.empty());
  const std::string path = JoinPath(m.mnt, "checkpoints/job/f");
  ASSERT_TRUE(WriteFileAtomic(path, hoard::testing::PseudoRandomBytes(3 << 20, 9)).ok());

  std::atomic<int> first_opens{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  m.fs->ckpt().TEST_SetBeforeFirstOpen([&](uint64_t) {
    if (first_opens++ == 0) released.wait_for(20s);
  });
  int fd_a = -1, fd_b = -1;
  std::thread a([&] { fd_a = ::open(path.c_str(), O_WRONLY); });
  ASSERT_TRUE(hoard::testing::Eventually([&] { return first_opens.load() == 1; }));
  const std::string written = "new bytes!";
  std::atomic<bool> b_wrote{false};
  std::thread b([&] {
    fd_b = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    b_wrote = fd_b >= 0 && ::pwrite(fd_b, written.data(), written.size(), 0) == ssize_t(written.size());
  });
  // b's open waits for a's first open to end (before the fix it copied in
  // nothing, truncated and wrote while a was still getting the file ready).
  ASSERT_TRUE(hoard::testing::Eventually([&] { return m.fs->ckpt().TEST_first_open_waits() == 1; }));
  EXPECT_FALSE(b_wrote.load());
  release.set_value();
  a.join();
  b.join();
  ASSERT_GE(fd_a, 0) << std::strerror(errno);
  ASSERT_GE(fd_b, 0);
  ASSERT_TRUE(b_wrote.load());
  EXPECT_EQ(::close(fd_a), 0);
  EXPECT_EQ(::close(fd_b), 0);
  EXPECT_EQ(first_opens.load(), 1) << "the second open shares the first's file";

  Result<proto::CkptEntry> e = cluster.coordinator().checkpoints().Lookup("job/f");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size, written.size());
  Result<std::string> back = ReadFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, written);
}

// A file whose copies retention released (P, older than the newest
// --ckpt-keep-last checkpoints) is opened for writing: the coordinator keeps
// it again, so that nodes do not evict the chunks sent ahead for its commit.
TEST(CkptCommitTest, OpeningAReleasedFileForWritingKeepsItsCopiesAgain) {
  using namespace std::chrono_literals;
  hoard::testing::TempDir tmp("hoard-ckpt-reopen");
  hoard::testing::TestCluster cluster(tmp.path(), "mem://o");
  cluster.DrainCheckpoints();
  ASSERT_TRUE(cluster.Start([](Coordinator::Options* o) { o->ckpt.keep_last = 1; }).ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 3);
  ASSERT_FALSE(m.mnt.empty());
  CkptTable& table = cluster.coordinator().checkpoints();
  for (const char* step : {"step1", "step2"}) {
    ASSERT_EQ(::mkdir(JoinPath(m.mnt, std::string("checkpoints/job/") + step).c_str(), 0755), 0);
    ASSERT_TRUE(WriteFileAtomic(JoinPath(m.mnt, std::string("checkpoints/job/") + step + "/f"),
                                hoard::testing::PseudoRandomBytes(100000, 3))
                    .ok());
  }
  auto level = [&](const std::string& path) {
    Result<proto::CkptEntry> e = table.Lookup(path);
    return e.ok() ? e->level : uint8_t(255);
  };
  ASSERT_TRUE(hoard::testing::Eventually(
      [&] { return level("job/step1/f") == uint8_t(proto::CkptLevel::kP) && level("job/step2/f") == uint8_t(proto::CkptLevel::kP); },
      60s))
      << "the drain did not bring both files to P";
  const uint64_t id = table.Lookup("job/step1/f")->id;
  auto kept = [&] {
    std::vector<uint64_t> k = table.Work("node9", {}).keep_files;
    return std::find(k.begin(), k.end(), id) != k.end();
  };
  ASSERT_FALSE(kept()) << "step1 is released: P and older than the newest checkpoint";
  const int fd = ::open(JoinPath(m.mnt, "checkpoints/job/step1/f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_TRUE(kept());
  ASSERT_EQ(::pwrite(fd, "x", 1, 5), 1);
  EXPECT_EQ(::close(fd), 0);
  Result<proto::CkptEntry> e = table.Lookup("job/step1/f");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->gen, 2u);
  EXPECT_EQ(e->size, 100000u);
  EXPECT_TRUE(kept());
}

// A second node's mount stats a file while node 1 writes it (size 0 then)
// and opens it right after node 1's close, well within the 1 s the kernel
// may keep the attributes it got: it reads every byte (close-to-open, as NFS
// gives), not the empty file the stale size says.
TEST(CkptCommitTest, AnotherMountOpeningAfterTheCloseReadsTheWholeFile) {
  hoard::testing::TempDir tmp("hoard-ckpt-cto");
  hoard::testing::TestCluster cluster(tmp.path(), "mem://o");
  ASSERT_TRUE(cluster.Start().ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 3);
  ASSERT_FALSE(m.mnt.empty());
  HoardFs::Options options = TestMountOptions(cluster, "mount-cache2");
  options.local_store = JoinPath(cluster.dir(), "node2/store");
  options.node_name = "node2";
  HoardFs fs2(options);
  const std::string mnt2 = JoinPath(cluster.dir(), "mnt2");
  std::unique_ptr<TestMount> mount2 = TestMount::Start(&fs2, mnt2);
  ASSERT_NE(mount2, nullptr);

  for (int round = 0; round < 3; ++round) {
    const std::string rel = "checkpoints/job/f" + std::to_string(round);
    const std::string data = hoard::testing::PseudoRandomBytes(100000 + round, 40 + round);
    const int fd = ::open(JoinPath(m.mnt, rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd, data.data(), data.size()), ssize_t(data.size()));
    // Node 2 looks while it is written: nothing committed yet.
    struct stat st;
    ASSERT_EQ(::stat(JoinPath(mnt2, rel).c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_size, 0);
    ASSERT_EQ(::fsync(fd), 0);
    ASSERT_EQ(::close(fd), 0);
    Result<std::string> back = ReadFile(JoinPath(mnt2, rel));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->size(), data.size()) << "round " << round;
    EXPECT_TRUE(*back == data) << "round " << round;
    ASSERT_EQ(::stat(JoinPath(mnt2, rel).c_str(), &st), 0);
    EXPECT_EQ(uint64_t(st.st_size), data.size()) << "round " << round << ": stat after the open";
  }
}

// A reader on the writer's node that closes its fd while the save goes on
// does not commit the writer's unfinished file (a commit nobody asked for,
// of a partial file, which would drain to NFS); the writer's close does.
TEST(CkptCommitTest, AReadersCloseDoesNotCommitTheWritersFile) {
  hoard::testing::TempDir tmp("hoard-ckpt-reader");
  hoard::testing::TestCluster cluster(tmp.path(), "mem://o");
  ASSERT_TRUE(cluster.Start().ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 3);
  ASSERT_FALSE(m.mnt.empty());
  const std::string path = JoinPath(m.mnt, "checkpoints/job/model.pt");
  const std::string data = hoard::testing::PseudoRandomBytes(3 * kCs / 2, 11);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), kCs), ssize_t(kCs));
  Result<proto::CkptEntry> before = cluster.coordinator().checkpoints().Lookup("job/model.pt");
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  const int rfd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0) << std::strerror(errno);
  char buf[4096];
  ASSERT_EQ(::pread(rfd, buf, sizeof buf, 0), ssize_t(sizeof buf));  // the writer's bytes
  EXPECT_EQ(std::memcmp(buf, data.data(), sizeof buf), 0);
  ASSERT_EQ(::close(rfd), 0);
  Result<proto::CkptEntry> after = cluster.coordinator().checkpoints().Lookup("job/model.pt");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->gen, before->gen) << "the reader's close committed the writer's file";
  EXPECT_EQ(after->size, before->size);

  ASSERT_EQ(::write(fd, data.data() + kCs, data.size() - kCs), ssize_t(data.size() - kCs));
  ASSERT_EQ(::close(fd), 0);
  Result<proto::CkptEntry> done = cluster.coordinator().checkpoints().Lookup("job/model.pt");
  ASSERT_TRUE(done.ok());
  EXPECT_GT(done->gen, before->gen);
  EXPECT_EQ(done->size, data.size());
  Result<std::string> back = ReadFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
}

// A file past what one commit can list (65,536 chunks) is refused when it is
// written or truncated there (EFBIG), not at its close after all its bytes.
TEST(CkptCommitTest, AFileTooLargeToCommitFailsAtTheWrite) {
  hoard::testing::TempDir tmp("hoard-ckpt-efbig");
  hoard::testing::TestCluster cluster(tmp.path(), "mem://o");
  ASSERT_TRUE(cluster.Start().ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 3);
  ASSERT_FALSE(m.mnt.empty());
  const std::string path = JoinPath(m.mnt, "checkpoints/job/huge.pt");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const off_t limit = off_t(proto::kMaxArrayEntries) * off_t(kCs);
  EXPECT_EQ(::pwrite(fd, "x", 1, limit), -1);
  EXPECT_EQ(errno, EFBIG);
  EXPECT_EQ(::ftruncate(fd, limit + 1), -1);
  EXPECT_EQ(errno, EFBIG);
  ASSERT_EQ(::pwrite(fd, "hello", 5, 0), 5);  // the file is still usable
  ASSERT_EQ(::close(fd), 0);
  Result<std::string> back = ReadFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "hello");
}

// The mount asks for FUSE_DIRECT_IO_ALLOW_MMAP only with passthrough (6.9).
bool KernelAtLeast(int major, int minor) {
  utsname u;
  int ma = 0, mi = 0;
  return ::uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &ma, &mi) == 2 &&
         (ma > major || (ma == major && mi >= minor));
}

TEST(CkptCommitTest, AWritableHandleSkipsTheMountsPageCacheYetMapsShared) {
  hoard::testing::TempDir tmp("hoard-ckpt-dio");
  hoard::testing::TestCluster cluster(tmp.path(), "mem://o");
  ASSERT_TRUE(cluster.Start().ok());
  CkptTestMount m = CkptTestMount::Start(cluster, 2);
  ASSERT_FALSE(m.mnt.empty());
  if (!KernelAtLeast(6, 9)) GTEST_SKIP() << "the mount keeps checkpoint writes cached on this kernel";
  ASSERT_TRUE(m.fs->passthrough().direct_io_mmap()) << "the mount did not negotiate FUSE_DIRECT_IO_ALLOW_MMAP";

  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::string data = hoard::testing::PseudoRandomBytes(kCs + 3 * page, 61);
  const std::string path = JoinPath(m.mnt, "checkpoints/job/mapped.bin");
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644));
  ASSERT_GE(fd.get(), 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd.get(), data.data(), data.size()), ssize_t(data.size()));
  void* map = ::mmap(nullptr, data.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  char* p = static_cast<char*>(map);
  // The handle is direct_io: written with cached I/O, every page would be in
  // the mount's page cache. (Mapping a direct_io handle drops what is cached,
  // so this shows how the handle was opened; what it saves in memory is
  // bench/RESULTS.md's.)
  std::vector<unsigned char> resident((data.size() + page - 1) / page);
  ASSERT_EQ(::mincore(map, data.size(), resident.data()), 0) << std::strerror(errno);
  EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }), 0)
      << "the written pages are cached by the mount";
  {
    // A reader on this node while the file is open for writing: its reads
    // are not cached either (so none can keep bytes a write replaced).
    UniqueFd rd(::open(path.c_str(), O_RDONLY));
    ASSERT_GE(rd.get(), 0) << std::strerror(errno);
    std::string seen(data.size(), '\0');
    ASSERT_EQ(::pread(rd.get(), seen.data(), seen.size(), 0), ssize_t(seen.size()));
    EXPECT_TRUE(seen == data);
    void* rmap = ::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, rd.get(), 0);
    ASSERT_NE(rmap, MAP_FAILED) << std::strerror(errno);
    ASSERT_EQ(::mincore(rmap, data.size(), resident.data()), 0) << std::strerror(errno);
    EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }), 0)
        << "the reader's pages are cached by the mount";
    ASSERT_EQ(::munmap(rmap, data.size()), 0);
  }
  EXPECT_EQ(std::memcmp(p, data.data(), data.size()), 0) << "the mapping reads what write(2) wrote";

  // Writes through the mapping reach the file; writes through the fd reach
  // the mapping.
  std::memset(p + page, 'm', page);
  data.replace(page, page, page, 'm');
  ASSERT_EQ(::msync(map, data.size(), MS_SYNC), 0) << std::strerror(errno);
  std::string back(page, '\0');
  ASSERT_EQ(::pread(fd.get(), back.data(), page, off_t(page)), ssize_t(page));
  EXPECT_EQ(back, std::string(page, 'm'));
  const std::string w(page, 'w');
  ASSERT_EQ(::pwrite(fd.get(), w.data(), page, off_t(2 * page)), ssize_t(page));
  data.replace(2 * page, page, w);
  EXPECT_EQ(std::string(p + 2 * page, page), w) << "the mapping still shows the bytes before the pwrite";
  ASSERT_EQ(::munmap(map, data.size()), 0);
  ASSERT_EQ(::close(fd.Release()), 0);

  // Committed as written, every byte, at R.
  Result<std::string> got = ReadFile(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  Result<proto::CkptEntry> e = cluster.coordinator().checkpoints().Lookup("job/mapped.bin");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size, data.size());
  EXPECT_EQ(e->level, uint8_t(proto::CkptLevel::kR));
}

}  // namespace
}  // namespace hoard::fuse
