// Reads of committed checkpoint files from this node's whole-file copy
// (issue 34): on the writer's node a reader is served straight from
// STORE/ckpt/files/<id> while that copy is stamped with the handle's
// generation, and through CkptChunks (the replicas) once it is not. On a real
// kernel mount over an in-process cluster of three nodes.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "store/replica_store.h"
#include "testing/test_cluster.h"
#include "testing/test_mount.h"

namespace hoard::fuse {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
using hoard::testing::PseudoRandomBytes;

constexpr uint64_t kCs = 4u << 20;  // the checkpoint chunk size

int Save(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  if (::write(fd, data.data(), data.size()) != ssize_t(data.size())) return errno;
  return ::close(fd) == 0 ? 0 : errno;
}

// Reads `fd` from offset 0 to its end in 1 MiB preads (the kernel splits
// nothing further: the mount's max_write is 1 MiB).
std::string ReadAll(int fd) {
  std::string out, buf(1 << 20, '\0');
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), off);
    if (n <= 0) break;
    out.append(buf.data(), size_t(n));
    off += n;
  }
  return out;
}

class CkptLocalReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.Start().ok());
    m_ = CkptTestMount::Start(cluster_, 3);
    ASSERT_FALSE(m_.mnt.empty());
  }
  std::string P(const std::string& rel) { return JoinPath(m_.mnt, "checkpoints/" + rel); }
  proto::CkptEntry Entry(const std::string& rel) {
    Result<proto::CkptEntry> e = cluster_.coordinator().checkpoints().Lookup(rel);
    EXPECT_TRUE(e.ok()) << rel << ": " << e.status().ToString();
    return e.ok() ? *e : proto::CkptEntry{};
  }
  // node1's whole-file copy of `id` (the mount's local file).
  std::string CopyPath(uint64_t id) {
    return ReplicaStore::WholeFilePath(JoinPath(cluster_.dir(), "node1/store"), id);
  }
  std::optional<uint64_t> Stamp(uint64_t id) {
    UniqueFd fd(::open(CopyPath(id).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return std::nullopt;
    return ReplicaStore::StampedGeneration(fd.get());
  }
  uint64_t CopyBytes() { return m_.fs->ckpt().TEST_whole_copy_bytes(); }

  hoard::testing::TempDir tmp_{"hoard-ckpt-local-read"};
  hoard::testing::TestCluster cluster_{tmp_.path(), "mem://o"};
  CkptTestMount m_;
};

TEST_F(CkptLocalReadTest, TheWritersNodeReadsACommittedFileFromItsWholeFileCopy) {
  const std::string bytes = PseudoRandomBytes(2 * kCs + 1000, 1);
  ASSERT_EQ(Save(P("job/a.pt"), bytes), 0);
  const proto::CkptEntry e = Entry("job/a.pt");
  ASSERT_EQ(Stamp(e.id), std::optional<uint64_t>(e.gen)) << "no user xattrs on this disk?";
  const int fd = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const uint64_t before = CopyBytes();
  EXPECT_TRUE(ReadAll(fd) == bytes);
  EXPECT_EQ(CopyBytes() - before, bytes.size());
  // Reads past the end, and one straddling it, are cut there.
  char buf[4096];
  EXPECT_EQ(::pread(fd, buf, sizeof buf, off_t(bytes.size())), 0);
  ASSERT_EQ(::pread(fd, buf, sizeof buf, off_t(bytes.size() - 10)), 10);
  EXPECT_EQ(std::string(buf, 10), bytes.substr(bytes.size() - 10));
  ASSERT_EQ(::close(fd), 0);
}

TEST_F(CkptLocalReadTest, AHandleKeepsItsBytesWhenEvictionRemovesTheCopy) {
  const std::string bytes = PseudoRandomBytes(kCs + 77, 2);
  ASSERT_EQ(Save(P("job/a.pt"), bytes), 0);
  const proto::CkptEntry e = Entry("job/a.pt");
  const int fd = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  // What the node agent's eviction does to a copy nobody writes.
  ASSERT_EQ(::unlink(CopyPath(e.id).c_str()), 0);
  const uint64_t before = CopyBytes();
  EXPECT_TRUE(ReadAll(fd) == bytes);
  EXPECT_EQ(CopyBytes() - before, bytes.size());
  ASSERT_EQ(::close(fd), 0);
  // A new open finds no copy: the replicas serve it.
  const int again = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(again, 0);
  EXPECT_TRUE(ReadAll(again) == bytes);
  EXPECT_EQ(CopyBytes() - before, bytes.size());
  ASSERT_EQ(::close(again), 0);
}

TEST_F(CkptLocalReadTest, ACopyBeingRewrittenLosesItsStampBeforeItsBytesChange) {
  const std::string one = PseudoRandomBytes(kCs + 5, 3), two = PseudoRandomBytes(kCs + 5, 4);
  ASSERT_EQ(Save(P("job/a.pt"), one), 0);
  const proto::CkptEntry e1 = Entry("job/a.pt");
  ASSERT_EQ(Stamp(e1.id), std::optional<uint64_t>(e1.gen));
  const int w = ::open(P("job/a.pt").c_str(), O_RDWR);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::pwrite(w, two.data(), two.size(), 0), ssize_t(two.size()));
  EXPECT_EQ(Stamp(e1.id), std::nullopt);
  // fsync commits while the file stays open: stamped again...
  ASSERT_EQ(::fsync(w), 0);
  const proto::CkptEntry e2 = Entry("job/a.pt");
  ASSERT_EQ(e2.gen, e1.gen + 1);
  EXPECT_EQ(Stamp(e1.id), std::optional<uint64_t>(e2.gen));
  // ...until the next write, which would otherwise leave generation e2's
  // stamp on other bytes if its commit never came.
  ASSERT_EQ(::pwrite(w, "x", 1, 0), 1);
  EXPECT_EQ(Stamp(e1.id), std::nullopt);
  ASSERT_EQ(::ftruncate(w, 10), 0);
  EXPECT_EQ(Stamp(e1.id), std::nullopt);
  ASSERT_EQ(::close(w), 0);
  const proto::CkptEntry e3 = Entry("job/a.pt");
  EXPECT_EQ(Stamp(e1.id), std::optional<uint64_t>(e3.gen));
  const int r = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(r, 0);
  EXPECT_EQ(ReadAll(r), "x" + two.substr(1, 9));
  ASSERT_EQ(::close(r), 0);
}

TEST_F(CkptLocalReadTest, AReaderOpenAcrossARewriteOnThisNodeReadsAsOnALocalFileSystem) {
  // On the writer's node every handle sees the writer's bytes (one file, as
  // on a local file system: checkpoint/ckpt_fs.h) and, after its commit, the
  // new generation; never bytes of neither.
  const std::string one = PseudoRandomBytes(2 * kCs, 5), two = PseudoRandomBytes(2 * kCs, 6);
  ASSERT_EQ(Save(P("job/a.pt"), one), 0);
  const int r = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(r, 0);
  char buf[100];
  ASSERT_EQ(::pread(r, buf, sizeof buf, 0), ssize_t(sizeof buf));
  EXPECT_EQ(std::string(buf, sizeof buf), one.substr(0, sizeof buf));
  const int w = ::open(P("job/a.pt").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::write(w, two.data(), kCs), ssize_t(kCs));
  ASSERT_EQ(::pread(r, buf, sizeof buf, 0), ssize_t(sizeof buf));
  EXPECT_EQ(std::string(buf, sizeof buf), two.substr(0, sizeof buf));
  ASSERT_EQ(::write(w, two.data() + kCs, kCs), ssize_t(kCs));
  ASSERT_EQ(::close(w), 0);
  EXPECT_TRUE(ReadAll(r) == two);
  ASSERT_EQ(::close(r), 0);
}

TEST_F(CkptLocalReadTest, AHandleOfAnOlderGenerationNeverReadsTheCopyOnceItHoldsANewerOne) {
  // A second mount (node2) rewrites the file: node1's open handle keeps the
  // old generation, read from node1's copy, which still holds it; a handle
  // of node2's generation opened on node1 reads the replicas, never that
  // copy.
  HoardFs::Options options = TestMountOptions(cluster_, "mount-cache2");
  options.local_store = JoinPath(cluster_.dir(), "node2/store");
  options.node_name = "node2";
  options.mountpoint = JoinPath(cluster_.dir(), "mnt2");
  HoardFs fs2(options);
  std::unique_ptr<TestMount> mount2 = TestMount::Start(&fs2, options.mountpoint, "");
  ASSERT_NE(mount2, nullptr);
  const std::string there = JoinPath(options.mountpoint, "checkpoints/job/a.pt");

  const std::string one = PseudoRandomBytes(kCs + 3, 7), two = PseudoRandomBytes(kCs + 3, 8);
  ASSERT_EQ(Save(P("job/a.pt"), one), 0);
  const int old_handle = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(old_handle, 0);
  ASSERT_EQ(Save(there, two), 0);
  const proto::CkptEntry e2 = Entry("job/a.pt");
  uint64_t before = CopyBytes();
  EXPECT_TRUE(ReadAll(old_handle) == one);
  EXPECT_EQ(CopyBytes() - before, one.size());
  const int new_handle = ::open(P("job/a.pt").c_str(), O_RDONLY);
  ASSERT_GE(new_handle, 0);
  before = CopyBytes();
  EXPECT_TRUE(ReadAll(new_handle) == two);
  EXPECT_EQ(CopyBytes(), before) << "the copy holds another generation";
  ASSERT_EQ(::close(old_handle), 0);
  ASSERT_EQ(::close(new_handle), 0);
}

}  // namespace
}  // namespace hoard::fuse
