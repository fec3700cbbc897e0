// The checkpoint namespace as a POSIX directory on real kernel FUSE mounts
// over an in-process cluster (issue 27): a job that does not run as root
// saves, renames and deletes its own checkpoints and no one else's; only the
// close of the last descriptor open for writing commits (not a forked
// child's, a dup's or an mmap object's); an open file keeps its bytes after a
// rename over it or an unlink, on this node and another; a rewrite sends and
// stores only the chunks that changed, and old generations' copies go once
// nobody reads them; locks are the cluster's; symlinks, names, times, links
// and refusals behave as on a local file system.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <grp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "testing/test_mount.h"
#include "testing/test_cluster.h"

namespace hoard::fuse {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
using hoard::testing::PseudoRandomBytes;

constexpr uint64_t kCs = 4u << 20;  // the checkpoint chunk size
constexpr uid_t kUser = 65534, kOther = 65533;

// Runs `fn` in a child process as uid:gid; its result (0 or an errno) is the
// child's exit status. Only system calls in `fn`: the parent has threads.
int As(uid_t uid, gid_t gid, const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) {
      ::_exit(255);
    }
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 254;
}

int Err(int rc) { return rc == 0 ? 0 : errno; }

// Writes `data` to a new file with one write(2) and closes it (the close
// commits); 0 or the errno.
int Save(const std::string& path, const std::string& data, mode_t mode = 0644) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0) return errno;
  if (::write(fd, data.data(), data.size()) != ssize_t(data.size())) return errno;
  return Err(::close(fd));
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[1 << 16];
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0) break;
    out.append(buf, size_t(n));
    off += n;
  }
  return out;
}

// Replica bytes (not the writer's whole-file copies) on every node's disk.
uint64_t ReplicaBytes(const std::string& dir, int nodes) {
  uint64_t total = 0;
  for (int i = 1; i <= nodes; ++i) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(JoinPath(dir, "node" + std::to_string(i) + "/store/ckpt/chunks"), ec)) {
      total += e.file_size(ec);
    }
  }
  return total;
}

// Runs fn() in a forked child and returns its exit status (-1 if it did not
// exit). Why: this process serves the mount, and a process that does must
// not drop a dirty shared mapping of a file on it: munmap holds the memory
// map's lock while it waits for the writeback, which one of this process's
// own FUSE threads has to serve, and that thread may need the same lock (a
// malloc growing its arena): a deadlock. A mount's users are other
// processes; here, the child. (fn may only make system calls: the child of
// a threaded process.)
template <typename Fn>
int InChild(Fn fn) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) ::_exit(fn());
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class CkptPosixTest : public ::testing::Test {
 protected:
  // Three nodes, node1's mount (allow_other) on DIR/mnt; old generations go
  // as soon as nobody holds them (retire_grace 0: the holds decide alone).
  void SetUp() override {
    // Other users must reach the mount (mkdtemp makes 0700).
    ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
    ASSERT_TRUE(cluster_.Start([](Coordinator::Options* o) { o->ckpt.retire_grace = 0ms; }).ok());
    m_ = CkptTestMount::Start(cluster_, 3, ",allow_other");
    ASSERT_FALSE(m_.mnt.empty());
  }
  // node2's mount on DIR/mnt2.
  void StartSecondMount() {
    HoardFs::Options options = TestMountOptions(cluster_, "mount-cache2");
    options.local_store = JoinPath(cluster_.dir(), "node2/store");
    options.node_name = "node2";
    options.mountpoint = JoinPath(cluster_.dir(), "mnt2");
    fs2_ = std::make_unique<HoardFs>(options);
    mount2_ = TestMount::Start(fs2_.get(), options.mountpoint, ",allow_other");
    ASSERT_NE(mount2_, nullptr);
    mnt2_ = options.mountpoint;
  }
  std::string P(const std::string& rel) { return JoinPath(m_.mnt, "checkpoints/" + rel); }
  CkptTable& table() { return cluster_.coordinator().checkpoints(); }
  proto::CkptEntry Entry(const std::string& rel) {
    Result<proto::CkptEntry> e = table().Lookup(rel);
    EXPECT_TRUE(e.ok()) << rel << ": " << e.status().ToString();
    return e.ok() ? *e : proto::CkptEntry{};
  }

  hoard::testing::TempDir tmp_{"hoard-ckpt-posix"};
  hoard::testing::TestCluster cluster_{tmp_.path(), "mem://o"};
  CkptTestMount m_;
  std::unique_ptr<HoardFs> fs2_;
  std::unique_ptr<TestMount> mount2_;
  std::string mnt2_;
};

TEST_F(CkptPosixTest, AJobNotRunAsRootSavesItsCheckpointsAndOthersCannotTouchThem) {
  const std::string job = P("userjob"), step = P("userjob/step_100"), shard = P("userjob/step_100/shard");
  const std::string tmp = P("userjob/step_100/shard.tmp"), data = PseudoRandomBytes(5 << 20, 3);
  // Anyone may start a job directory (checkpoints/ is 1777, like /tmp).
  ASSERT_EQ(As(kUser, kUser, [&] { return Err(::mkdir(job.c_str(), 0755)); }), 0);
  ASSERT_EQ(As(kUser, kUser, [&] { return Err(::mkdir(step.c_str(), 0755)); }), 0);
  ASSERT_EQ(As(kUser, kUser, [&] { return Save(tmp, data); }), 0);
  ASSERT_EQ(As(kUser, kUser, [&] { return Err(::rename(tmp.c_str(), shard.c_str())); }), 0);
  ASSERT_EQ(As(kUser, kUser, [&] { return Save(shard, data.substr(1000)); }), 0) << "an overwrite";
  struct stat st;
  ASSERT_EQ(::stat(shard.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUser);
  EXPECT_EQ(st.st_gid, kUser);
  EXPECT_EQ(uint64_t(st.st_size), data.size() - 1000);
  EXPECT_EQ(Entry("userjob/step_100/shard").level, uint8_t(proto::CkptLevel::kR));
  // Another user: no writes into the 0755 directory, no changes to the file.
  EXPECT_EQ(As(kOther, kOther, [&] { return Save(P("userjob/step_100/x"), "x"); }), EACCES);
  EXPECT_EQ(As(kOther, kOther, [&] { return Err(::unlink(shard.c_str())); }), EACCES);
  EXPECT_EQ(As(kOther, kOther, [&] { return Err(::chmod(shard.c_str(), 0666)); }), EPERM);
  EXPECT_EQ(As(kOther, kOther, [&] { return Err(::open(shard.c_str(), O_WRONLY) < 0 ? -1 : 0); }), EACCES);
  EXPECT_EQ(As(kOther, kOther, [&] { return Err(::rename(job.c_str(), P("stolen").c_str())); }), EPERM)
      << "checkpoints/ is sticky";
  EXPECT_EQ(As(kUser, kUser, [&] { return Err(::chown(shard.c_str(), kOther, kOther)); }), EPERM)
      << "only root gives a file away";
  // Root may; and chown keeps the bytes.
  ASSERT_EQ(::chown(shard.c_str(), kOther, kOther), 0);
  ASSERT_EQ(::stat(shard.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kOther);
  // The owner deletes its own checkpoints.
  ASSERT_EQ(::chown(shard.c_str(), kUser, kUser), 0);
  EXPECT_EQ(As(kUser, kUser, [&] { return Err(::unlink(shard.c_str())); }), 0);
  EXPECT_EQ(As(kUser, kUser, [&] { return Err(::rmdir(step.c_str())); }), 0);
}

TEST_F(CkptPosixTest, AWriteByAnotherUserClearsSetUserIdAndAWriteByRootDoesNot) {
  const std::string f = P("job/suid");
  ASSERT_EQ(Save(f, "x"), 0);
  ASSERT_EQ(::chmod(f.c_str(), 06777), 0);
  ASSERT_EQ(Save(f, "root writes"), 0);
  struct stat st;
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 06777u);
  ASSERT_EQ(As(kUser, kUser, [&] {
              const int fd = ::open(f.c_str(), O_WRONLY);
              if (fd < 0) return errno;
              if (::write(fd, "y", 1) != 1) return errno;
              return Err(::close(fd));
            }),
            0);
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
}

TEST_F(CkptPosixTest, OnlyTheLastCloseOfAWriterCommits) {
  const std::string f = P("job/model.pt");
  const std::string data = PseudoRandomBytes(7 << 20, 5);
  const int fd = ::open(f.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), 5 << 20), 5 << 20);
  // A forked helper (a DataLoader worker, a subprocess) exits: its copy of
  // the descriptor is closed.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(Entry("job/model.pt").gen, 0u) << "a forked child's exit committed half a file";
  // A dup closed.
  const int dup = ::dup(fd);
  ASSERT_EQ(::close(dup), 0);
  EXPECT_EQ(Entry("job/model.pt").gen, 0u) << "closing a dup committed half a file";
  // What Python's mmap object does: its own dup, mapped and closed (the
  // mapping written and dropped in a child: see InChild).
  const int mfd = ::dup(fd);
  ASSERT_EQ(InChild([&] {
              void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
              if (map == MAP_FAILED) return 1;
              std::memcpy(map, data.data(), 16);
              return ::munmap(map, 4096) == 0 ? 0 : 2;
            }),
            0);
  ASSERT_EQ(::close(mfd), 0);
  EXPECT_EQ(Entry("job/model.pt").gen, 0u) << "closing an mmap object committed half a file";
  // The writer's own close commits the whole file.
  ASSERT_EQ(::pwrite(fd, data.data() + (5 << 20), data.size() - (5 << 20), 5 << 20),
            ssize_t(data.size() - (5 << 20)));
  ASSERT_EQ(::close(fd), 0);
  const proto::CkptEntry e = Entry("job/model.pt");
  EXPECT_EQ(e.gen, 1u);
  EXPECT_EQ(e.size, data.size());
  Result<std::string> back = ReadFile(f);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
}

TEST_F(CkptPosixTest, AMappingThatOutlivesItsDescriptorCommitsWhenItGoes) {
  const std::string f = P("job/mapped");
  // The mapping's process is a child (see InChild); two pipes step it:
  // mapped and closed -> (checked here) -> written and unmapped.
  int mapped[2], go[2];
  ASSERT_EQ(::pipe(mapped), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char b = 0;
    const int fd = ::open(f.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::ftruncate(fd, 8192) != 0) ::_exit(1);
    char* map = static_cast<char*>(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (map == MAP_FAILED || ::close(fd) != 0) ::_exit(2);  // numpy.memmap's way: the mapping goes on
    if (::write(mapped[1], &b, 1) != 1 || ::read(go[0], &b, 1) != 1) ::_exit(3);
    std::memset(map, 'z', 8192);
    ::_exit(::munmap(map, 8192) == 0 ? 0 : 4);
  }
  ::close(mapped[1]);
  ::close(go[0]);
  char b = 0;
  ASSERT_EQ(::read(mapped[0], &b, 1), 1) << "the child could not map the file";
  EXPECT_EQ(Entry("job/mapped").gen, 0u) << "the mapping is still being written";
  ASSERT_EQ(::write(go[1], &b, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(mapped[0]);
  ::close(go[1]);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The release after the mapping commits (the kernel sends it after munmap
  // returns: nothing waits for it).
  ASSERT_TRUE(Eventually([&] { return Entry("job/mapped").gen == 1; }));
  Result<std::string> back = ReadFile(f);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, std::string(8192, 'z'));
}

TEST_F(CkptPosixTest, AnOpenFileKeepsItsBytesAfterARenameOverItAndAnUnlinkOnEveryNode) {
  StartSecondMount();
  const std::string old_bytes = PseudoRandomBytes(2 * kCs + 1000, 7), new_bytes = PseudoRandomBytes(kCs + 5, 8);
  ASSERT_EQ(Save(P("job/last.ckpt"), old_bytes), 0);
  const proto::CkptEntry old = Entry("job/last.ckpt");
  const int here = ::open(P("job/last.ckpt").c_str(), O_RDONLY);
  const int there = ::open(JoinPath(mnt2_, "checkpoints/job/last.ckpt").c_str(), O_RDONLY);
  ASSERT_GE(here, 0);
  ASSERT_GE(there, 0);
  // Both mounts' sessions tell the coordinator what they read.
  ASSERT_TRUE(Eventually([&] {
    return cluster_.coordinator().ckpt_sessions().sessions() == 2 && table().TEST_held(old.id, old.gen);
  }));
  // torch.save's pattern: a new file, renamed over the old one; then the
  // name is removed altogether.
  ASSERT_EQ(Save(P("job/last.ckpt.tmp"), new_bytes), 0);
  ASSERT_EQ(::rename(P("job/last.ckpt.tmp").c_str(), P("job/last.ckpt").c_str()), 0);
  ASSERT_EQ(::unlink(P("job/last.ckpt").c_str()), 0);
  // The new file, which nobody reads, is retired and its copies deleted on
  // the nodes; the old one, which both mounts read, is all that is kept.
  ASSERT_TRUE(Eventually([&] {
    cluster_.coordinator().CheckLiveness();
    return table().old_generations() == 1 && table().pending_drops() == 0;
  }, 20s));
  for (const int fd : {here, there}) {
    struct stat st;
    ASSERT_EQ(::fstat(fd, &st), 0) << std::strerror(errno);
    EXPECT_EQ(uint64_t(st.st_size), old_bytes.size());
    EXPECT_EQ(st.st_nlink, 0u);
    EXPECT_EQ(::lseek(fd, 0, SEEK_END), off_t(old_bytes.size()));
    EXPECT_TRUE(ReadAll(fd) == old_bytes);
  }
  const uint64_t before = ReplicaBytes(cluster_.dir(), 3);
  ASSERT_EQ(::close(here), 0);
  ASSERT_EQ(::close(there), 0);
  // Once nobody reads it, its copies go.
  ASSERT_TRUE(Eventually([&] {
    cluster_.coordinator().CheckLiveness();
    return ReplicaBytes(cluster_.dir(), 3) < before;
  }, 20s));
}

TEST_F(CkptPosixTest, ADescriptorOfAReplacedFileNeverChangesTheFileThatTookItsName) {
  ASSERT_EQ(Save(P("job/a"), "old bytes"), 0);
  const int old = ::open(P("job/a").c_str(), O_RDWR);
  ASSERT_GE(old, 0);
  ASSERT_EQ(Save(P("job/b"), "new bytes"), 0);
  ASSERT_EQ(::rename(P("job/b").c_str(), P("job/a").c_str()), 0);
  ASSERT_EQ(::ftruncate(old, 3), 0) << std::strerror(errno);
  EXPECT_NE(Err(::fchmod(old, 0600)), 0);
  ASSERT_EQ(::close(old), 0);
  Result<std::string> now = ReadFile(P("job/a"));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, "new bytes");
  struct stat st;
  ASSERT_EQ(::stat(P("job/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(CkptPosixTest, AnAppendSendsOneChunkAndRewritesKeepOneGeneration) {
  const std::string f = P("job/last.ckpt");
  std::string data = PseudoRandomBytes(3 * kCs, 9);
  ASSERT_EQ(Save(f, data), 0);
  const Committer& c = m_.fs->ckpt().committer();
  const uint64_t reused = c.chunks_reused(), sent = c.chunks_sent_at_commit() + c.chunks_sent_ahead();
  // Appending 4 KiB and fsyncing sends one chunk, not the file.
  const int fd = ::open(f.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  const std::string tail = PseudoRandomBytes(4096, 10);
  ASSERT_EQ(::write(fd, tail.data(), tail.size()), 4096);
  ASSERT_EQ(::fsync(fd), 0);
  ASSERT_EQ(::close(fd), 0);
  data += tail;
  EXPECT_EQ(c.chunks_reused() - reused, 3u);
  EXPECT_EQ(c.chunks_sent_at_commit() + c.chunks_sent_ahead() - sent, 1u);
  // Rewritten in place ten times (open "wb", the whole file), one chunk's
  // bytes different each time: the replicas hold about one generation.
  for (int round = 0; round < 10; ++round) {
    std::memcpy(data.data() + kCs + 100, PseudoRandomBytes(64, 100 + round).data(), 64);
    ASSERT_EQ(Save(f, data), 0);
  }
  Result<std::string> back = ReadFile(f);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
  // K = 2: one copy of each chunk besides the writer's, and nothing else once
  // the old generations are retired.
  ASSERT_TRUE(Eventually([&] {
    cluster_.coordinator().CheckLiveness();
    return ReplicaBytes(cluster_.dir(), 3) <= data.size() + 5 * 4096;
  }, 20s)) << ReplicaBytes(cluster_.dir(), 3) << " replica bytes for a " << data.size() << "-byte file";
}

TEST_F(CkptPosixTest, LocksAreTheClustersNotANodes) {
  StartSecondMount();
  ASSERT_EQ(Save(P("job/lock"), ""), 0);
  const std::string there = JoinPath(mnt2_, "checkpoints/job/lock");
  const int a = ::open(P("job/lock").c_str(), O_RDWR);
  const int b = ::open(there.c_str(), O_RDWR);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(::flock(a, LOCK_EX), 0);
  EXPECT_EQ(Err(::flock(b, LOCK_EX | LOCK_NB)), EWOULDBLOCK) << "node 2 got the lock node 1 holds";
  // fcntl locks are another kind, as on Linux, but just as cluster-wide.
  struct flock wl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100};
  ASSERT_EQ(::fcntl(b, F_SETLK, &wl), 0) << std::strerror(errno);
  struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 1};
  ASSERT_EQ(::fcntl(a, F_GETLK, &probe), 0);
  EXPECT_EQ(probe.l_type, F_WRLCK);
  EXPECT_EQ(probe.l_start, 0);
  EXPECT_EQ(probe.l_len, 100);
  EXPECT_EQ(Err(::fcntl(a, F_SETLK, &probe)), EAGAIN);
  // A blocking lock waits for the holder's unlock.
  std::thread waiter([&] {
    struct flock w = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    EXPECT_EQ(::fcntl(a, F_SETLKW, &w), 0) << std::strerror(errno);
  });
  ASSERT_TRUE(Eventually([&] { return m_.fs->ckpt().lock_waiters() == 1; })) << "the waiter is not waiting";
  struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  ASSERT_EQ(::fcntl(b, F_SETLK, &un), 0);
  waiter.join();
  // The holder's close releases its flock.
  ASSERT_EQ(::close(a), 0);
  ASSERT_TRUE(Eventually([&] { return ::flock(b, LOCK_EX | LOCK_NB) == 0; }));
  ASSERT_EQ(::close(b), 0);
  // An OFD lock belongs to its open file, and goes with the file's last close.
  const int c = ::open(P("job/lock").c_str(), O_RDWR);
  const int d = ::open(there.c_str(), O_RDWR);
  ASSERT_GE(c, 0);
  ASSERT_GE(d, 0);
  struct flock ofd = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
  ASSERT_EQ(::fcntl(c, F_OFD_SETLK, &ofd), 0) << std::strerror(errno);
  EXPECT_EQ(Err(::fcntl(d, F_OFD_SETLK, &ofd)), EAGAIN);
  ASSERT_EQ(::close(c), 0);
  EXPECT_TRUE(Eventually([&] { return ::fcntl(d, F_OFD_SETLK, &ofd) == 0; }));
  ASSERT_EQ(::close(d), 0);
}

// A lock may be held for hours: requests waiting for it must not occupy the
// mount's worker threads (libfuse runs a bounded number), or a few waiters
// would stall every other request of the mount.
TEST_F(CkptPosixTest, ManyBlockedLockersDoNotStallTheMount) {
  ASSERT_EQ(Save(P("job/busy"), "x"), 0);
  const int holder = ::open(P("job/busy").c_str(), O_RDWR);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  constexpr int kWaiters = 64;
  std::vector<std::thread> waiters;
  std::atomic<int> got{0};
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      const int fd = ::open(P("job/busy").c_str(), O_RDWR);
      if (fd < 0) return;
      if (::flock(fd, LOCK_EX) == 0) {
        ++got;
        ::flock(fd, LOCK_UN);
      }
      ::close(fd);
    });
  }
  ASSERT_TRUE(Eventually([&] { return m_.fs->ckpt().lock_waiters() == kWaiters; }));
  // The mount still answers.
  ASSERT_EQ(Save(P("job/meanwhile"), "still served"), 0);
  Result<std::string> back = ReadFile(P("job/meanwhile"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "still served");
  ASSERT_EQ(::close(holder), 0);  // each waiter then gets it in turn
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(got.load(), kWaiters);
}

TEST_F(CkptPosixTest, SymlinksNamesTimesLinksAndRefusals) {
  // A DeepSpeed/NeMo-style "latest" link.
  ASSERT_EQ(::mkdir(P("job/iter_100").c_str(), 0755), 0);
  ASSERT_EQ(Save(P("job/iter_100/model.pt"), "weights"), 0);
  ASSERT_EQ(::symlink("iter_100", P("job/latest").c_str()), 0) << std::strerror(errno);
  char target[64] = {};
  ASSERT_EQ(::readlink(P("job/latest").c_str(), target, sizeof target), 8);
  EXPECT_STREQ(target, "iter_100");
  struct stat st;
  ASSERT_EQ(::lstat(P("job/latest").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  Result<std::string> via = ReadFile(P("job/latest/model.pt"));
  ASSERT_TRUE(via.ok());
  EXPECT_EQ(*via, "weights");
  // Names past NAME_MAX.
  EXPECT_EQ(Save(P("job/" + std::string(256, 'n')), "x"), ENAMETOOLONG);
  EXPECT_EQ(Err(::mkdir(P("job/" + std::string(256, 'd')).c_str(), 0755)), ENAMETOOLONG);
  EXPECT_EQ(Save(P("job/" + std::string(255, 'n')), "x"), 0);
  // What the namespace refuses: EPERM, never EROFS.
  EXPECT_EQ(Err(::mkfifo(P("job/fifo").c_str(), 0644)), EPERM);
  EXPECT_EQ(Err(::mknod(P("job/dev").c_str(), S_IFCHR | 0644, makedev(1, 3))), EPERM);
  EXPECT_EQ(Err(::link(P("job/iter_100/model.pt").c_str(), P("job/hard").c_str())), EPERM);
  EXPECT_EQ(Err(::mknod(P("job/plain").c_str(), S_IFREG | 0600, 0)), 0);
  // A directory's links count its subdirectories.
  ASSERT_EQ(::stat(P("job").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 3u);  // ., .., iter_100
  // Creating moves the directory's mtime and ctime; utimensat sets atime
  // and mtime apart, with UTIME_NOW and UTIME_OMIT.
  struct stat before;
  ASSERT_EQ(::stat(P("job/iter_100").c_str(), &before), 0);
  ASSERT_EQ(Save(P("job/iter_100/optim.pt"), "o"), 0);
  struct stat after;
  ASSERT_EQ(::stat(P("job/iter_100").c_str(), &after), 0);
  EXPECT_GT(after.st_mtim.tv_sec * 1'000'000'000 + after.st_mtim.tv_nsec,
            before.st_mtim.tv_sec * 1'000'000'000 + before.st_mtim.tv_nsec);
  const struct timespec times[2] = {{1'900'000'000, 5}, {0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("job/iter_100/model.pt").c_str(), times, 0), 0);
  ASSERT_EQ(::stat(P("job/iter_100/model.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1'900'000'000);
  EXPECT_EQ(st.st_atim.tv_nsec, 5);
  EXPECT_NE(st.st_mtim.tv_sec, 1'900'000'000) << "UTIME_OMIT";
  const struct timespec now[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("job/iter_100/model.pt").c_str(), now, 0), 0);
  ASSERT_EQ(::stat(P("job/iter_100/model.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1'900'000'000);
  EXPECT_GT(st.st_mtim.tv_sec, ::time(nullptr) - 60);
  // chmod moves ctime, not mtime.
  const struct stat m0 = st;
  ASSERT_EQ(::chmod(P("job/iter_100/model.pt").c_str(), 0600), 0);
  ASSERT_EQ(::stat(P("job/iter_100/model.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, m0.st_mtim.tv_sec);
  EXPECT_EQ(st.st_mtim.tv_nsec, m0.st_mtim.tv_nsec);
  EXPECT_GT(st.st_ctim.tv_sec * 1'000'000'000 + st.st_ctim.tv_nsec,
            m0.st_ctim.tv_sec * 1'000'000'000 + m0.st_ctim.tv_nsec);
}

}  // namespace
}  // namespace hoard::fuse
