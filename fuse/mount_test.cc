// The mount on a real kernel FUSE mount, over an in-process cluster: a
// coordinator, three node agents on loopback ZeroMQ, and an in-memory origin.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "fuse/hoard_fs.h"
#include "fuse/local_fds.h"
#include "testing/test_mount.h"
#include "store/chunk_store.h"
#include "testing/test_cluster.h"

namespace hoard::fuse {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
constexpr uint64_t kChunk = 65536;

std::string Pattern(size_t n, int seed) { return hoard::testing::PseudoRandomBytes(n, seed); }

Result<std::string> ReadAll(const std::string& path) { return ReadFile(path); }

// Flips the first byte of every chunk file under `dir` (their records, in
// the xattr, stay): each then fails its check. Returns how many.
size_t DamageEveryChunkFile(const std::string& dir) {
  size_t damaged = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.file_size() == 0) continue;
    UniqueFd fd(::open(e.path().c_str(), O_RDWR));
    char c;
    if (!fd.valid() || ::pread(fd.get(), &c, 1, 0) != 1) continue;
    c ^= 0x40;
    if (::pwrite(fd.get(), &c, 1, 0) == 1) ++damaged;
  }
  return damaged;
}

class MountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    cluster_ = std::make_unique<hoard::testing::TestCluster>(dir_, "mem://o");
    ASSERT_TRUE(cluster_->Start().ok());
    MemAttributes a;
    a.uid = 1234;
    a.gid = 5678;
    a.perm = 0640;
    a.mtime_ns = 1'600'000'000'123'456'789;
    files_["big.bin"] = Pattern(20 * kChunk + 77, 1);
    files_["dir one/ünï ☃.txt"] = "hello, utf-8\n";
    files_["dir one/sub/deep.dat"] = Pattern(3 * kChunk, 2);
    files_["empty"] = "";
    for (int i = 0; i < 40; ++i) files_["imgs/" + std::to_string(1000 + i) + ".jpg"] = Pattern(5000 + i * 311, 10 + i);
    for (auto& [p, b] : files_) ASSERT_TRUE(origin().AddFile(p, b, p == "empty" ? a : MemAttributes{}).ok());
    ASSERT_TRUE(origin().AddSymlink("latest", "imgs").ok());
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(cluster_->StartAgent("node" + std::to_string(i)).ok());
    ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
    auto add = coord().AddDataset({.name = "ds", .source = "mem://o", .chunk_size = kChunk});
    ASSERT_TRUE(add.ok()) << add.status().ToString();
    meta_ = add->meta;

    fs_ = std::make_unique<HoardFs>(TestMountOptions(*cluster_));
    mnt_ = JoinPath(dir_, "mnt");
    mount_ = TestMount::Start(fs_.get(), mnt_);
    ASSERT_NE(mount_, nullptr) << "cannot start the mount, or mount FUSE here";
    root_ = JoinPath(mnt_, "datasets/ds");
    ASSERT_TRUE(Eventually([&] { return ::access(root_.c_str(), F_OK) == 0; }));
  }

  void TearDown() override {
    mount_.reset();
    fs_.reset();
    cluster_.reset();
  }

  Coordinator& coord() { return cluster_->coordinator(); }
  MemOrigin& origin() { return cluster_->origin(); }
  NodeAgent* agent(const std::string& name) { return cluster_->agent(name); }

  // Another mount of the same cluster, reading node1's store.
  std::unique_ptr<HoardFs> SecondMount(const std::string& cache) {
    return std::make_unique<HoardFs>(TestMountOptions(*cluster_, cache));
  }

  void WarmAll() {
    ASSERT_TRUE(coord().Warm("ds").ok());
    ASSERT_TRUE(Eventually([&] { return coord().GetStatus("ds")->datasets[0].complete; }, 20s));
  }

  hoard::testing::TempDir tmp_{"hoard-mount"};
  std::string dir_, mnt_, root_;
  std::unique_ptr<hoard::testing::TestCluster> cluster_;
  std::map<std::string, std::string> files_;
  proto::DatasetMeta meta_;
  std::unique_ptr<HoardFs> fs_;
  std::unique_ptr<TestMount> mount_;
};

TEST_F(MountTest, NamespaceMatchesTheOrigin) {
  std::set<std::string> top;
  DIR* d = ::opendir(JoinPath(mnt_, "datasets").c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = ::readdir(d)) top.insert(e->d_name);
  ::closedir(d);
  EXPECT_EQ(top, (std::set<std::string>{".", "..", "ds"}));

  for (const auto& [path, bytes] : files_) {
    struct stat st;
    ASSERT_EQ(::lstat(JoinPath(root_, path).c_str(), &st), 0) << path;
    Result<OriginEntry> o = origin().Stat(path);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(uint64_t(st.st_size), bytes.size()) << path;
    EXPECT_EQ(st.st_mode, o->mode) << path;
    EXPECT_EQ(st.st_uid, o->uid) << path;
    EXPECT_EQ(st.st_gid, o->gid) << path;
    EXPECT_EQ(int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, o->mtime_ns) << path;
    EXPECT_EQ(st.st_nlink, 1u);
    EXPECT_EQ(uint64_t(st.st_blocks), (bytes.size() + 511) / 512) << path;
  }
  struct stat st;
  ASSERT_EQ(::lstat(JoinPath(root_, "empty").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  ASSERT_EQ(::lstat(JoinPath(root_, "dir one").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_nlink, 3u) << "2 + one subdirectory";
  char target[64] = {};
  ASSERT_EQ(::readlink(JoinPath(root_, "latest").c_str(), target, sizeof target), 4);
  EXPECT_STREQ(target, "imgs");
  EXPECT_EQ(::access(JoinPath(root_, "latest/1000.jpg").c_str(), F_OK), 0) << "the symlink resolves in the mount";
  EXPECT_NE(::lstat(JoinPath(root_, "nope").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_NE(::lstat(JoinPath(mnt_, "datasets/nope").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(MountTest, ReadsReturnTheOriginsBytesColdAndWarm) {
  for (const auto& [path, bytes] : files_) {
    Result<std::string> got = ReadAll(JoinPath(root_, path));
    ASSERT_TRUE(got.ok()) << path << ": " << got.status().ToString();
    EXPECT_TRUE(*got == bytes) << path;
  }
  WarmAll();
  // Drop the kernel's copy so the second pass really goes to hoard.
  mount_.reset();
  mount_ = std::make_unique<TestMount>(fs_.get(), mnt_);
  ASSERT_TRUE(mount_->ok());
  const uint64_t local_before = fs_->reader().counters().local_bytes.load();
  const uint64_t origin_before = origin().TotalBytesRead();
  for (const auto& [path, bytes] : files_) {
    Result<std::string> got = ReadAll(JoinPath(root_, path));
    ASSERT_TRUE(got.ok()) << path;
    EXPECT_TRUE(*got == bytes) << path;
  }
  EXPECT_GT(fs_->reader().counters().local_bytes.load(), local_before) << "node1's chunks come from its disk";
  EXPECT_EQ(origin().TotalBytesRead(), origin_before) << "a warm pass never touches the origin";
}

// A dataset file's close(2) costs no round trip through the mount (the open
// asks the kernel for no FLUSH): for a reader of small files that is one
// request in four. A checkpoint file's close still reaches the mount.
TEST_F(MountTest, ClosingADatasetFileSendsNoFlush) {
  const uint64_t opens_before = fs_->stats().opens.load();
  const uint64_t flushes_before = fs_->stats().flushes.load();
  int n = 0;
  for (const auto& [path, bytes] : files_) {
    Result<std::string> got = ReadAll(JoinPath(root_, path));
    ASSERT_TRUE(got.ok()) << path;
    EXPECT_TRUE(*got == bytes) << path;
    ++n;
  }
  EXPECT_GE(fs_->stats().opens.load() - opens_before, uint64_t(n)) << "every file was opened through the mount";
  EXPECT_EQ(fs_->stats().flushes.load(), flushes_before);

  ASSERT_TRUE(Eventually([&] { return ::mkdir(JoinPath(mnt_, "checkpoints/j").c_str(), 0755) == 0; }));
  const int fd = ::open(JoinPath(mnt_, "checkpoints/j/f").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "bytes", 5), 5);
  // This mount has no node of its own, so the commit at close fails: what
  // matters here is that the close reached the mount at all.
  (void)::close(fd);
  EXPECT_GT(fs_->stats().flushes.load(), flushes_before) << "a checkpoint file's close is seen";
}

// A dataset file's close sends no FLUSH (above), so the mount does not hear
// a process's close drop its POSIX locks: a lock whose process no longer has
// the file open is gone all the same, as POSIX says.
TEST_F(MountTest, ADatasetLockGoesWithItsProcesssClose) {
  const std::string path = JoinPath(root_, "big.bin");
  const pid_t child = ::fork();
  if (child == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    struct flock rl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    ::_exit(fd >= 0 && ::fcntl(fd, F_SETLK, &rl) == 0 ? 0 : 1);  // exits holding it: the close is the exit's
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  ASSERT_EQ(::fcntl(fd, F_GETLK, &probe), 0) << std::strerror(errno);
  EXPECT_EQ(probe.l_type, F_UNLCK) << "a lock of an exited process";
  // A live holder's lock is reported, with its process id.
  struct flock rl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  ASSERT_EQ(::fcntl(fd, F_SETLK, &rl), 0);
  const pid_t prober = ::fork();
  if (prober == 0) {
    const int pfd = ::open(path.c_str(), O_RDONLY);
    struct flock p = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    ::_exit(pfd >= 0 && ::fcntl(pfd, F_GETLK, &p) == 0 && p.l_type == F_RDLCK && p.l_pid == ::getppid() ? 0 : 1);
  }
  ASSERT_EQ(::waitpid(prober, &status, 0), prober);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(::close(fd), 0);
}

// Reads all of `fd` from offset 0 with pread, in pieces of `piece` bytes.
std::string PreadAll(int fd, size_t piece = 4096) {
  std::string out;
  std::string buf(piece, '\0');
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(out.size()));
    if (n <= 0) return out;
    out.append(buf.data(), static_cast<size_t>(n));
  }
}

// A file held whole in one chunk file on node1's disk is opened for kernel
// passthrough: its bytes come straight from the chunk file, and no READ
// reaches the mount. Two opens of it at once share the backing file, and
// an mmap of it reads the same bytes.
TEST_F(MountTest, SmallLocalFilesAreReadByTheKernelWithoutTheMount) {
  WarmAll();
  mount_.reset();  // drop the kernel's copies
  mount_ = std::make_unique<TestMount>(fs_.get(), mnt_);
  ASSERT_TRUE(mount_->ok());
  ASSERT_TRUE(fs_->passthrough().enabled()) << "this kernel should take FUSE passthrough (Linux 6.9+)";

  auto view = agent("node1")->view();
  const DatasetView* ds = view->dataset("ds");
  ASSERT_NE(ds, nullptr);
  const std::string store = JoinPath(cluster_->dir(), "node1/store");
  int passed_through = 0;
  for (const auto& [path, bytes] : files_) {
    if (bytes.empty() || bytes.size() > kChunk) continue;
    const ChunkKey key = ds->manifest.chunk_key(*ds->manifest.Resolve(path), 0);
    const bool on_node1 = ::access(ChunkStore::ChunkPath(store, key).c_str(), F_OK) == 0;
    const uint64_t opens = fs_->stats().passthrough_opens.load();
    const uint64_t opened_bytes = fs_->stats().passthrough_bytes.load();
    const uint64_t reads = fs_->stats().reads.load();
    Result<std::string> got = ReadAll(JoinPath(root_, path));
    ASSERT_TRUE(got.ok()) << path;
    ASSERT_TRUE(*got == bytes) << path;
    const bool passthrough = fs_->stats().passthrough_opens.load() != opens;
    EXPECT_EQ(passthrough, on_node1) << path << ": opened for passthrough exactly when its chunk is on node1's disk";
    if (!passthrough) continue;
    ++passed_through;
    EXPECT_EQ(fs_->stats().passthrough_bytes.load() - opened_bytes, bytes.size()) << path;
    EXPECT_EQ(fs_->stats().reads.load(), reads) << path << ": a passthrough file's reads never reach the mount";

    const std::string full = JoinPath(root_, path);
    UniqueFd a(::open(full.c_str(), O_RDONLY));
    UniqueFd b(::open(full.c_str(), O_RDONLY));
    ASSERT_TRUE(a.valid() && b.valid()) << path << ": " << std::strerror(errno);
    char first[100];
    ASSERT_EQ(::read(a.get(), first, sizeof first), ssize_t(std::min(sizeof first, bytes.size())));
    a.Reset();  // the first open ends while the second reads on
    EXPECT_TRUE(PreadAll(b.get(), 777) == bytes) << path;
    void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, b.get(), 0);
    ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(map, bytes.data(), bytes.size()), 0) << path;
    ::munmap(map, bytes.size());
  }
  EXPECT_GE(passed_through, 1) << "node1 holds about a third of the small files";
  // The hit ratio counts them as read from this node's disk.
  metrics::Registry registry;
  fs_->RegisterMetrics(&registry);
  const ChunkReader::Counters& c = fs_->reader().counters();
  const double local = double(c.local_bytes.load() + fs_->stats().passthrough_bytes.load());
  const double all = local + double(c.peer_bytes.load() + c.origin_bytes.load());
  const std::string text = registry.Render();
  const size_t at = text.find("\nhoard_mount_hit_ratio ");  // the sample, not its # HELP line
  ASSERT_NE(at, std::string::npos);
  EXPECT_NEAR(std::stod(text.substr(at + 23)), local / all, 1e-9);
  EXPECT_GT(local / all, double(c.local_bytes.load()) / all);
  // Every backing file was let go with its last open.
  EXPECT_TRUE(Eventually([&] { return fs_->passthrough().open_inodes() == 0; }));
}

// Passthrough turned off for the mount (a backing open that failed) while a
// file is open for passthrough: later opens of that file share its backing
// file still (a cached-mode open of it would fail with EIO).
TEST_F(MountTest, AFileOpenForPassthroughStaysReadableAfterPassthroughIsTurnedOff) {
  WarmAll();
  mount_.reset();
  mount_ = std::make_unique<TestMount>(fs_.get(), mnt_);
  ASSERT_TRUE(mount_->ok());
  ASSERT_TRUE(fs_->passthrough().enabled()) << "this kernel should take FUSE passthrough (Linux 6.9+)";
  for (const auto& [path, bytes] : files_) {
    if (bytes.empty() || bytes.size() > kChunk) continue;
    const std::string full = JoinPath(root_, path);
    const uint64_t opens = fs_->stats().passthrough_opens.load();
    UniqueFd a(::open(full.c_str(), O_RDONLY));
    ASSERT_TRUE(a.valid()) << path << ": " << std::strerror(errno);
    if (fs_->stats().passthrough_opens.load() == opens) continue;  // not on node1's disk
    // A directory cannot back a file: the ioctl fails and turns passthrough off.
    UniqueFd dir(::open("/", O_RDONLY | O_DIRECTORY));
    const fuse_ino_t unused = 0x7fffffff;
    EXPECT_FALSE(fs_->TEST_passthrough().Open(unused, dir.get()).passthrough);
    fs_->TEST_passthrough().Release(unused, false);
    ASSERT_FALSE(fs_->passthrough().enabled());
    UniqueFd b(::open(full.c_str(), O_RDONLY));
    ASSERT_TRUE(b.valid()) << path << ": " << std::strerror(errno);
    EXPECT_TRUE(PreadAll(b.get(), 4096) == bytes) << path;
    EXPECT_TRUE(PreadAll(a.get(), 4096) == bytes) << path;
    return;
  }
  GTEST_SKIP() << "no small file on node1's disk";
}

// A file open in the kernel's cached mode (its chunk was not local then)
// that becomes local meanwhile is opened in cached mode again while that open
// lasts: the kernel fails (EIO) a passthrough open of an inode it has open in
// cached mode. Once every open is closed, the next one is a passthrough one.
TEST_F(MountTest, AFileThatBecameLocalWhileOpenStaysCachedUntilClosed) {
  int checked = 0;
  for (const auto& [path, bytes] : files_) {
    if (path.rfind("imgs/", 0) != 0) continue;
    const std::string full = JoinPath(root_, path);
    const uint64_t opens = fs_->stats().passthrough_opens.load();
    // Cold, unless node1 fetched it with a neighbour it filled.
    UniqueFd a(::open(full.c_str(), O_RDONLY));
    ASSERT_TRUE(a.valid()) << path << ": " << std::strerror(errno);
    if (fs_->stats().passthrough_opens.load() != opens) continue;
    ASSERT_TRUE(PreadAll(a.get()) == bytes) << path;  // node1 may hold it now
    UniqueFd b(::open(full.c_str(), O_RDONLY));
    ASSERT_TRUE(b.valid()) << path << ": " << std::strerror(errno);
    EXPECT_TRUE(PreadAll(b.get()) == bytes) << path;
    EXPECT_EQ(fs_->stats().passthrough_opens.load(), opens) << path << ": opened for passthrough while open cached";
    a.Reset();
    b.Reset();
    // The RELEASEs are asynchronous: the next open is a passthrough one once
    // the mount has seen them, if node1 holds the file.
    UniqueFd c;
    ASSERT_TRUE(Eventually([&] { return fs_->passthrough().open_inodes() == 0; }));
    c = UniqueFd(::open(full.c_str(), O_RDONLY));
    ASSERT_TRUE(c.valid()) << path << ": " << std::strerror(errno);
    EXPECT_TRUE(PreadAll(c.get()) == bytes) << path;
    if (fs_->stats().passthrough_opens.load() > opens) ++checked;
  }
  // At least the first image node1 owns was not local when first opened.
  EXPECT_GE(checked, 1);
}

// With passthrough off, the same files are read through the mount.
TEST_F(MountTest, WithoutPassthroughEveryReadReachesTheMount) {
  WarmAll();
  HoardFs::Options o = TestMountOptions(*cluster_, "cache-off");
  o.passthrough = false;
  auto fs = std::make_unique<HoardFs>(o);
  auto m = TestMount::Start(fs.get(), JoinPath(dir_, "mnt-off"));
  ASSERT_NE(m, nullptr);
  const std::string root = JoinPath(dir_, "mnt-off/datasets/ds");
  ASSERT_TRUE(Eventually([&] { return ::access(root.c_str(), F_OK) == 0; }));
  for (const auto& [path, bytes] : files_) {
    Result<std::string> got = ReadAll(JoinPath(root, path));
    ASSERT_TRUE(got.ok()) << path;
    EXPECT_TRUE(*got == bytes) << path;
  }
  EXPECT_EQ(fs->stats().passthrough_opens.load(), 0u);
  EXPECT_GT(fs->reader().counters().local_bytes.load(), 0u);
  m.reset();
}

// Whether the first page of `path` is in the page cache.
bool FirstPageCached(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  if (!fd.valid()) return false;
  void* map = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return false;
  unsigned char resident = 0;
  const bool ok = ::mincore(map, 4096, &resident) == 0;
  ::munmap(map, 4096);
  return ok && (resident & 1);
}

// Opening a file of one chunk has the disk start on it (a reader's READ then
// finds it on its way): after an open and close with no read, the chunk of
// every such file node1 holds is in the page cache.
TEST_F(MountTest, OpeningASmallFileStartsReadingItsLocalChunk) {
  WarmAll();
  std::vector<std::string> firsts;
  for (auto& e : std::filesystem::recursive_directory_iterator(JoinPath(dir_, "node1/store/chunks"))) {
    const std::string name = e.path().filename().string();
    // A short first chunk: a file of one chunk.
    if (!e.is_regular_file() || !name.ends_with("-00000000") || e.file_size() <= 4096 ||
        e.file_size() >= kChunk) {
      continue;
    }
    UniqueFd fd(::open(e.path().c_str(), O_RDONLY));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::fdatasync(fd.get()), 0);
    ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
    ASSERT_FALSE(FirstPageCached(e.path())) << "cannot drop " << name << " from the page cache";
    firsts.push_back(e.path());
  }
  ASSERT_GE(firsts.size(), 1u) << "node1 holds some files of one chunk";
  for (const auto& [path, bytes] : files_) {
    UniqueFd fd(::open(JoinPath(root_, path).c_str(), O_RDONLY));
    ASSERT_TRUE(fd.valid()) << path;
  }
  for (const std::string& f : firsts) EXPECT_TRUE(Eventually([&] { return FirstPageCached(f); }, 5s)) << f;
}

// What the mount shows on /metrics moves with the reads it serves: bytes by
// source from the reader's counters, and the FUSE operation histograms.
TEST_F(MountTest, MetricsCountReadsBySourceAndOperationLatency) {
  metrics::Registry registry;
  fs_->RegisterMetrics(&registry);
  auto count = [&](const std::string& series) {
    const std::string text = registry.Render();
    const size_t at = text.find(series + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 1));
  };
  const double reads_before = count("hoard_fuse_op_seconds_count{op=\"read\"}");
  ASSERT_GE(reads_before, 0);
  Result<std::string> got = ReadAll(JoinPath(root_, "dir one/sub/deep.dat"));
  ASSERT_TRUE(got.ok());
  EXPECT_GT(count("hoard_fuse_op_seconds_count{op=\"read\"}"), reads_before);
  EXPECT_GT(count("hoard_fuse_op_seconds_count{op=\"lookup\"}"), 0);
  const ChunkReader::Counters& c = fs_->reader().counters();
  const double all = count("hoard_mount_read_bytes_total{source=\"local\"}") +
                     count("hoard_mount_read_bytes_total{source=\"peer\"}") +
                     count("hoard_mount_read_bytes_total{source=\"origin\"}");
  EXPECT_EQ(all, double(c.local_bytes.load() + c.peer_bytes.load() + c.origin_bytes.load()));
  EXPECT_GE(all, double(3 * kChunk));
  EXPECT_GT(count("hoard_peer_request_seconds_count"), 0) << "cold chunks come from their owners";
}

TEST_F(MountTest, ReadStraddlingChunksOfTwoNodes) {
  WarmAll();
  // Find a chunk boundary of big.bin whose two sides have different owners.
  auto view = agent("node1")->view();
  const DatasetView* ds = view->dataset("ds");
  uint32_t entry = *ds->manifest.Resolve("big.bin");
  int boundary = -1;
  for (uint32_t i = 0; i + 1 < 20; ++i) {
    auto a = view->placement().Owners(ds->manifest.chunk_key(entry, i), 1);
    auto b = view->placement().Owners(ds->manifest.chunk_key(entry, i + 1), 1);
    if (a[0] != b[0]) {
      boundary = int(i + 1);
      break;
    }
  }
  ASSERT_GE(boundary, 0) << "20 chunks over 3 nodes always change owner somewhere";
  UniqueFd fd(::open(JoinPath(root_, "big.bin").c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid());
  const off_t off = off_t(boundary) * kChunk - 1000;
  std::string buf(3000, '\0');
  ASSERT_EQ(::pread(fd.get(), buf.data(), buf.size(), off), 3000);
  EXPECT_TRUE(buf == files_["big.bin"].substr(off, 3000));
  // And the tail: a read past the end is short.
  ASSERT_EQ(::pread(fd.get(), buf.data(), buf.size(), off_t(files_["big.bin"].size()) - 10), 10);
}

TEST_F(MountTest, DeadOwnerFallsBackToTheOriginQuickly) {
  // Stop every node but node1: their chunks must come from the origin.
  cluster_->StopAgent("node2");
  cluster_->StopAgent("node3");
  auto start = std::chrono::steady_clock::now();
  Result<std::string> got = ReadAll(JoinPath(root_, "big.bin"));
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == files_["big.bin"]);
  // Each dead owner costs one connect timeout (300 ms), once: after that it is
  // skipped until the map marks it down. Readers on several FUSE threads may
  // each meet a dead owner before it is marked, but paid per chunk the 14 or
  // so chunks of the dead owners would fail 14 times and take over 4 s.
  EXPECT_LT(took, 4s);
  EXPECT_LT(fs_->reader().counters().peer_failures.load(), 10u) << "dead owners were tried for each chunk";
  EXPECT_GT(fs_->reader().counters().origin_bytes.load(), 0u);
}

// The read tier: a mount keeps copies of what it read from peers, and the
// next epoch, in a new mount process (no kernel or memory cache), reads them
// from this node's disk: with the peers gone, nothing comes from the origin.
TEST_F(MountTest, TheNextEpochReadsPeersChunksFromTheReadTier) {
  WarmAll();
  const std::string tier_dir = JoinPath(dir_, "node1/store/read-tier");
  auto options = [&](const std::string& cache) {
    HoardFs::Options o = TestMountOptions(*cluster_, cache);
    o.read_tier_dir = tier_dir;
    o.read_tier_bytes = 64u << 20;
    return o;
  };
  auto read_all = [&](const std::string& mnt) {
    for (const auto& [path, bytes] : files_) {
      Result<std::string> got = ReadAll(JoinPath(mnt, "datasets/ds/" + path));
      ASSERT_TRUE(got.ok()) << path << ": " << got.status().ToString();
      EXPECT_TRUE(*got == bytes) << path;
    }
  };
  {
    auto fs = std::make_unique<HoardFs>(options("tier-cache-1"));
    auto mount = TestMount::Start(fs.get(), JoinPath(dir_, "mnt-tier-1"));
    ASSERT_NE(mount, nullptr);
    ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(dir_, "mnt-tier-1/datasets/ds").c_str(), F_OK) == 0; }));
    read_all(JoinPath(dir_, "mnt-tier-1"));
    ASSERT_NE(fs->reader().read_tier(), nullptr);
    fs->reader().read_tier()->Flush();
    const uint64_t peer = fs->reader().counters().peer_bytes.load();
    EXPECT_GT(peer, 0u) << "two thirds of the chunks are the other nodes'";
    EXPECT_EQ(fs->reader().read_tier()->counters().stored_bytes.load(), peer)
        << "every chunk fetched from a peer is kept, and nothing node1 holds itself";
  }
  cluster_->StopAgent("node2");
  cluster_->StopAgent("node3");
  const uint64_t origin_before = origin().TotalBytesRead();
  auto fs = std::make_unique<HoardFs>(options("tier-cache-2"));
  auto mount = TestMount::Start(fs.get(), JoinPath(dir_, "mnt-tier-2"));
  ASSERT_NE(mount, nullptr);
  ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(dir_, "mnt-tier-2/datasets/ds").c_str(), F_OK) == 0; }));
  read_all(JoinPath(dir_, "mnt-tier-2"));
  EXPECT_EQ(fs->reader().counters().peer_bytes.load(), 0u);
  EXPECT_EQ(fs->reader().counters().origin_bytes.load(), 0u);
  EXPECT_EQ(origin().TotalBytesRead(), origin_before);
  EXPECT_GT(fs->reader().counters().local_bytes.load(), 0u);

  // A removed dataset's copies are deleted.
  ASSERT_TRUE(Eventually([&] { return fs->reader().read_tier()->counters().used_bytes.load() > 0; }));
  ASSERT_TRUE(coord().RemoveDataset("ds").ok());
  EXPECT_TRUE(Eventually([&] { return fs->reader().read_tier()->counters().used_bytes.load() == 0; }));
}

// A copy in the read tier that fails its check (a bad disk write) is deleted
// and replaced by the good bytes fetched instead: the next mount reads every
// chunk from the tier again, and checks none in vain.
TEST_F(MountTest, ABadCopyInTheReadTierIsReplacedByTheBytesFetchedInstead) {
  WarmAll();
  const std::string tier_dir = JoinPath(dir_, "node1/store/read-tier");
  auto epoch = [&](const std::string& name) {
    HoardFs::Options o = TestMountOptions(*cluster_, "cache-" + name);
    o.read_tier_dir = tier_dir;
    o.read_tier_bytes = 64u << 20;
    auto fs = std::make_unique<HoardFs>(o);
    const std::string mnt = JoinPath(dir_, "mnt-" + name);
    auto mount = TestMount::Start(fs.get(), mnt);
    EXPECT_NE(mount, nullptr);
    if (mount == nullptr) return fs;
    EXPECT_TRUE(Eventually([&] { return ::access(JoinPath(mnt, "datasets/ds").c_str(), F_OK) == 0; }));
    for (const auto& [path, bytes] : files_) {
      Result<std::string> got = ReadAll(JoinPath(mnt, "datasets/ds/" + path));
      EXPECT_TRUE(got.ok() && *got == bytes) << path;
    }
    fs->reader().read_tier()->Flush();
    return fs;
  };
  ASSERT_GT(epoch("1")->reader().read_tier()->counters().stored_chunks.load(), 0u);
  const size_t damaged = DamageEveryChunkFile(JoinPath(tier_dir, "chunks"));
  ASSERT_GT(damaged, 0u);
  {
    auto fs = epoch("2");
    EXPECT_EQ(fs->reader().counters().corrupt_local_chunks.load(), damaged) << "each bad copy is checked once";
    EXPECT_EQ(fs->reader().read_tier()->counters().stored_chunks.load(), damaged) << "and replaced";
  }
  cluster_->StopAgent("node2");
  cluster_->StopAgent("node3");
  auto fs = epoch("3");
  EXPECT_EQ(fs->reader().counters().corrupt_local_chunks.load(), 0u);
  EXPECT_EQ(fs->reader().counters().peer_bytes.load(), 0u);
  EXPECT_EQ(fs->reader().counters().origin_bytes.load(), 0u);
}

TEST_F(MountTest, WritesAreRefusedReadOnly) {
  // Datasets are read-only versions of their origin: every change fails
  // with EROFS, even for root.
  const std::string big = JoinPath(root_, "big.bin");
  for (int flags : {O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC, O_WRONLY | O_APPEND}) {
    errno = 0;
    int fd = ::open(big.c_str(), flags);
    EXPECT_LT(fd, 0) << flags;
    EXPECT_EQ(errno, EROFS) << flags;
    if (fd >= 0) ::close(fd);
  }
  int fd = ::open(JoinPath(root_, "new.txt").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::mkdir(JoinPath(root_, "newdir").c_str(), 0755), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::unlink(JoinPath(root_, "empty").c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::rename(JoinPath(root_, "empty").c_str(), JoinPath(root_, "e2").c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::truncate(big.c_str(), 0), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::chmod(big.c_str(), 0777), 0);
  EXPECT_EQ(errno, EROFS);
  Result<std::string> got = ReadAll(big);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == files_["big.bin"]);
}

// numpy.memmap's default mode is "r+": a shared writable mapping would dirty
// the page cache every reader of the node shares. It must fail; a private
// (copy-on-write) mapping works and changes nobody else's bytes.
TEST_F(MountTest, SharedWritableMappingsAreRefused) {
  const std::string path = JoinPath(root_, "dir one/sub/deep.dat");
  const std::string& want = files_["dir one/sub/deep.dat"];
  UniqueFd ro(::open(path.c_str(), O_RDONLY));
  ASSERT_TRUE(ro.valid());
  EXPECT_EQ(::mmap(nullptr, want.size(), PROT_READ | PROT_WRITE, MAP_SHARED, ro.get(), 0), MAP_FAILED);
  EXPECT_EQ(errno, EACCES) << "a shared writable mapping needs a write open";
  void* p = ::mmap(nullptr, want.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, ro.get(), 0);
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  static_cast<char*>(p)[100] ^= 0x7f;
  ::munmap(p, want.size());
  Result<std::string> got = ReadAll(path);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == want) << "a private mapping's writes stay private";
}

// One request that touches 17 local chunks (1 MiB at an unaligned offset,
// 64 KiB chunks): more than a thread's fd cache holds. Every piece must come
// from its own chunk file, even those whose cached fd a later piece evicted.
TEST_F(MountTest, ARequestTouchingManyLocalChunksReadsTheRightBytes) {
  const std::string huge = Pattern(40 * kChunk, 91);
  ASSERT_TRUE(origin().AddFile("many/chunks.bin", huge).ok());
  auto add = coord().AddDataset({.name = "many", .source = "mem://o", .chunk_size = kChunk, .replicas = 3});
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  ASSERT_TRUE(coord().Warm("many").ok());
  ASSERT_TRUE(Eventually([&] { return coord().GetStatus("many")->datasets[0].complete; }, 30s));
  const std::string path = JoinPath(mnt_, "datasets/many/many/chunks.bin");
  ASSERT_TRUE(Eventually([&] { return ::access(path.c_str(), F_OK) == 0; }));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECT));
  ASSERT_TRUE(fd.valid());
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 4096, 1 << 20), 0);
  // Fill the thread caches with other chunks first, then read across many.
  for (off_t off : {off_t(20 * kChunk), off_t(4096), off_t(3 * kChunk + 8192), off_t(0)}) {
    ssize_t n = ::pread(fd.get(), buf, 1 << 20, off);
    ASSERT_EQ(n, std::min<ssize_t>(1 << 20, ssize_t(huge.size()) - off)) << std::strerror(errno);
    EXPECT_TRUE(std::memcmp(buf, huge.data() + off, size_t(n)) == 0) << "at " << off;
  }
  ::free(buf);
  EXPECT_EQ(fs_->reader().counters().peer_bytes.load(), 0u) << "replicas=3: every chunk is local";
}

TEST_F(MountTest, AnOpenFileOutlivesItsDataset) {
  ASSERT_TRUE(coord().AddDataset({.name = "brief", .source = "mem://o", .chunk_size = kChunk}).ok());
  const std::string path = JoinPath(mnt_, "datasets/brief/dir one/sub/deep.dat");
  ASSERT_TRUE(Eventually([&] { return ::access(path.c_str(), F_OK) == 0; }));
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(coord().RemoveDataset("brief").ok());
  ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(mnt_, "datasets/brief").c_str(), F_OK) != 0; }));
  // POSIX: the name is gone, the open file still reads its bytes.
  const std::string& want = files_["dir one/sub/deep.dat"];
  std::string buf(want.size(), '\0');
  ASSERT_EQ(::pread(fd.get(), buf.data(), buf.size(), 0), ssize_t(want.size())) << std::strerror(errno);
  EXPECT_TRUE(buf == want);
}

TEST_F(MountTest, ACorruptLocalChunkIsNeverServed) {
  WarmAll();
  // Flip a byte in every chunk file node1 holds: the mount verifies a local
  // chunk before its first use and reads a corrupt one from elsewhere.
  ASSERT_GT(DamageEveryChunkFile(JoinPath(dir_, "node1/store/chunks")), 0u);
  for (const auto& [path, bytes] : files_) {
    Result<std::string> got = ReadAll(JoinPath(root_, path));
    ASSERT_TRUE(got.ok()) << path << ": " << got.status().ToString();
    EXPECT_TRUE(*got == bytes) << path;
  }
  EXPECT_GT(fs_->reader().counters().corrupt_local_chunks.load(), 0u);
}

// Modes and owners are the origin's, enforced by the kernel
// (default_permissions); without allow_other only the mounter gets in.
TEST_F(MountTest, OriginPermissionsAreEnforcedForOtherUsers) {
  ASSERT_TRUE(origin().AddFile("perm/public.txt", "for everyone\n", {.perm = 0644, .uid = 1234, .gid = 5678}).ok());
  ASSERT_TRUE(origin().AddFile("perm/private.txt", "owner only\n", {.perm = 0600, .uid = 1234, .gid = 5678}).ok());
  ASSERT_TRUE(coord().AddDataset({.name = "perm", .source = "mem://o", .chunk_size = kChunk}).ok());
  // The test's temporary directory is 0700: let others reach the mount points.
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  // Opens `path` as uid/gid 65534 in a child; returns 0 or the errno.
  auto open_as_nobody = [](const std::string& path) {
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
      int fd = ::open(path.c_str(), O_RDONLY);
      ::_exit(fd >= 0 ? 0 : errno);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const std::string pub = JoinPath(mnt_, "datasets/perm/perm/public.txt");
  ASSERT_TRUE(Eventually([&] { return ::access(pub.c_str(), F_OK) == 0; }));
  EXPECT_EQ(open_as_nobody(pub), EACCES) << "a mount without allow_other is the mounter's alone";

  std::unique_ptr<HoardFs> fs = SecondMount("shared-cache");
  HoardFs& shared = *fs;
  ASSERT_TRUE(shared.Start().ok());
  const std::string mnt = JoinPath(dir_, "shared");
  ASSERT_TRUE(MakeDirs(mnt).ok());
  ASSERT_EQ(::chmod(mnt.c_str(), 0755), 0);
  TestMount m(&shared, mnt, ",allow_other");
  ASSERT_TRUE(m.ok());
  const std::string spub = JoinPath(mnt, "datasets/perm/perm/public.txt");
  ASSERT_TRUE(Eventually([&] { return ::access(spub.c_str(), F_OK) == 0; }));
  EXPECT_EQ(open_as_nobody(spub), 0) << "allow_other lets others in, and 0644 lets them read";
  EXPECT_EQ(open_as_nobody(JoinPath(mnt, "datasets/perm/perm/private.txt")), EACCES) << "0600 of uid 1234";
  // The owner itself may read its private file.
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(5678) != 0 || ::setuid(1234) != 0) ::_exit(100);
    ::_exit(::open(JoinPath(mnt, "datasets/perm/perm/private.txt").c_str(), O_RDONLY) >= 0 ? 0 : errno);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << WEXITSTATUS(status);
}

// A directory of 100,000 entries: one listing returns each name once, and
// every offset telldir() handed out still leads to the same next name.
TEST_F(MountTest, ReaddirOfAHundredThousandEntriesIsStable) {
  constexpr int kEntries = 100'000;
  for (int i = 0; i < kEntries; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "wide/f%06d", i);
    ASSERT_TRUE(origin().AddFile(name, "").ok());
  }
  ASSERT_TRUE(coord().AddDataset({.name = "wide", .source = "mem://o", .chunk_size = kChunk}).ok());
  const std::string dir = JoinPath(mnt_, "datasets/wide/wide");
  ASSERT_TRUE(Eventually([&] { return ::access(dir.c_str(), F_OK) == 0; }, 20s));
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u) << "no subdirectories";
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::pair<long, std::string>> all;  // (position before the entry, name)
  for (;;) {
    const long pos = ::telldir(d);
    dirent* e = ::readdir(d);
    if (e == nullptr) break;
    all.emplace_back(pos, e->d_name);
  }
  std::set<std::string> names;
  for (const auto& [pos, name] : all) names.insert(name);
  EXPECT_EQ(all.size(), size_t(kEntries) + 2);
  EXPECT_EQ(names.size(), size_t(kEntries) + 2) << "no name twice";
  EXPECT_TRUE(names.count("f000000") && names.count("f099999"));
  for (size_t i = 0; i < all.size(); i += 4999) {
    ::seekdir(d, all[i].first);
    dirent* e = ::readdir(d);
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(all[i].second, e->d_name) << i;
  }
  ::closedir(d);
  ASSERT_EQ(::stat(JoinPath(dir, "f054321").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(st.st_blocks, 0);
}

TEST_F(MountTest, MmapReadsTheSameBytes) {
  const std::string& want = files_["dir one/sub/deep.dat"];
  UniqueFd fd(::open(JoinPath(root_, "dir one/sub/deep.dat").c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid());
  void* p = ::mmap(nullptr, want.size(), PROT_READ, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(std::memcmp(p, want.data(), want.size()), 0);
  ::munmap(p, want.size());
}

TEST_F(MountTest, ReaddirOffsetsAreStable) {
  const std::string imgs = JoinPath(root_, "imgs");
  DIR* d = ::opendir(imgs.c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::pair<long, std::string>> all;
  while (dirent* e = ::readdir(d)) all.emplace_back(::telldir(d), e->d_name);
  ASSERT_EQ(all.size(), 42u);  // 40 files + . and ..
  // Seek back to each saved position: the next name is always the same.
  for (size_t i = 0; i + 1 < all.size(); i += 7) {
    ::seekdir(d, all[i].first);
    dirent* e = ::readdir(d);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(all[i + 1].second, e->d_name);
  }
  ::closedir(d);
}

TEST_F(MountTest, RemovedDatasetDisappearsAndANewOneAppears) {
  ASSERT_TRUE(coord().AddDataset({.name = "second", .source = "mem://o", .chunk_size = kChunk}).ok());
  ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(mnt_, "datasets/second/big.bin").c_str(), F_OK) == 0; }));
  struct stat before;
  ASSERT_EQ(::stat(JoinPath(mnt_, "datasets/second").c_str(), &before), 0);
  ASSERT_TRUE(coord().RemoveDataset("second").ok());
  ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(mnt_, "datasets/second").c_str(), F_OK) != 0; }));
  EXPECT_EQ(errno, ENOENT);
  // Re-added under the same name it is a new version with new inodes.
  ASSERT_TRUE(coord().AddDataset({.name = "second", .source = "mem://o", .chunk_size = kChunk}).ok());
  ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(mnt_, "datasets/second").c_str(), F_OK) == 0; }));
  struct stat after;
  ASSERT_EQ(::stat(JoinPath(mnt_, "datasets/second").c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
}

// `hoard dataset add` then `ls`: the name must resolve at once, not after the
// next poll. The lookup refreshes the map itself, and the kernel invalidation
// that follows must not be sent from inside that lookup (it would deadlock).
TEST_F(MountTest, NewDatasetIsVisibleRightAfterItIsAdded) {
  for (int i = 0; i < 5; ++i) {
    const std::string name = "fresh" + std::to_string(i);
    ASSERT_TRUE(coord().AddDataset({.name = name, .source = "mem://o", .chunk_size = kChunk}).ok());
    struct stat st;
    ASSERT_EQ(::stat(JoinPath(mnt_, "datasets/" + name + "/big.bin").c_str(), &st), 0) << name;
    EXPECT_EQ(uint64_t(st.st_size), files_["big.bin"].size());
  }
  std::set<std::string> names;
  DIR* d = ::opendir(JoinPath(mnt_, "datasets").c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  EXPECT_EQ(names.size(), 2u + 6u);
}

TEST_F(MountTest, ReadingAHugeFileHoldsFewDescriptors) {
  // 300 local chunks: more than every worker thread's fd cache together.
  const std::string huge = Pattern(300 * kChunk, 77);
  ASSERT_TRUE(origin().AddFile("huge/huge.bin", huge).ok());
  ASSERT_TRUE(coord().AddDataset({.name = "huge", .source = "mem://o", .chunk_size = kChunk}).ok());
  ASSERT_TRUE(coord().Warm("huge").ok());
  ASSERT_TRUE(Eventually([&] { return coord().GetStatus("huge")->datasets[0].complete; }, 30s));
  // Chunk files open in this process (the mount runs in it).
  auto count_fds = [] {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      n += std::filesystem::read_symlink(e.path(), ec).string().find("/store/chunks/") != std::string::npos;
    }
    return n;
  };
  const size_t before = count_fds();
  const std::string path = JoinPath(mnt_, "datasets/huge/huge/huge.bin");
  ASSERT_TRUE(Eventually([&] { return ::access(path.c_str(), F_OK) == 0; }));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECT));
  ASSERT_TRUE(fd.valid());
  // O_DIRECT: every read reaches the mount, none is served from the page cache.
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 4096, kChunk), 0);
  size_t peak = 0;
  std::string got;
  for (off_t off = 0;; off += kChunk) {
    ssize_t n = ::pread(fd.get(), buf, kChunk, off);
    ASSERT_GE(n, 0) << std::strerror(errno);
    if (n == 0) break;
    got.append(static_cast<char*>(buf), n);
    if (off % (16 * kChunk) == 0) peak = std::max(peak, count_fds());
  }
  ::free(buf);
  peak = std::max(peak, count_fds());
  EXPECT_TRUE(got == huge);
  // Each FUSE worker thread (libfuse's default cap is 10) keeps at most
  // LocalFds::kSlots chunk files open, whatever the file's size.
  EXPECT_LE(peak, before + 10 * LocalFds::kSlots);
  EXPECT_GT(peak, before) << "node1's chunks were read from its store";
  EXPECT_GT(fs_->reader().counters().local_bytes.load(), 0u);
}

TEST_F(MountTest, AFileGoneFromTheOriginIsEioNotEnoent) {
  ASSERT_TRUE(origin().Remove("imgs/1007.jpg").ok());
  UniqueFd fd(::open(JoinPath(root_, "imgs/1007.jpg").c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid()) << "the name is in the pinned manifest";
  char buf[100];
  EXPECT_LT(::pread(fd.get(), buf, sizeof buf, 0), 0);
  EXPECT_EQ(errno, EIO);
}

// Readers that miss the same chunk together share one fetch, failed or not:
// with every owner down and the origin failing, the origin sees the attempts
// of one fetch, not of one per reader.
TEST_F(MountTest, ReadersOfAChunkThatFailsShareOneFetch) {
  for (int i = 1; i <= 3; ++i) cluster_->StopAgent("node" + std::to_string(i));
  const std::string path = "imgs/1003.jpg";
  origin().FailPath(path, Status::Unavailable("the NFS server is away"));
  origin().SetDelay(200ms);
  auto read = [&] {
    // O_DIRECT: each reader's READ reaches the mount (no page cache to wait on).
    UniqueFd fd(::open(JoinPath(root_, path).c_str(), O_RDONLY | O_DIRECT));
    ASSERT_TRUE(fd.valid()) << std::strerror(errno);
    void* buf = nullptr;
    ASSERT_EQ(::posix_memalign(&buf, 4096, 8192), 0);
    EXPECT_LT(::pread(fd.get(), buf, 8192, 0), 0);
    EXPECT_EQ(errno, EIO);
    ::free(buf);
  };
  read();
  const uint64_t alone = origin().OpenCount(path);
  ASSERT_GT(alone, 0u);
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) readers.emplace_back(read);
  for (auto& t : readers) t.join();
  EXPECT_EQ(origin().OpenCount(path) - alone, alone) << "4 readers at once cost what 1 does";
}

TEST_F(MountTest, CoordinatorOutageKeepsReadsAndLookupsFast) {
  WarmAll();
  cluster_->StopCoordinator();
  auto start = std::chrono::steady_clock::now();
  // Unknown names ask the coordinator, which is gone: concurrent askers share
  // one short attempt, later ones get the failure at once.
  std::vector<std::thread> t;
  for (int i = 0; i < 6; ++i) {
    t.emplace_back([&, i] {
      struct stat st;
      EXPECT_NE(::stat(JoinPath(mnt_, "datasets/absent" + std::to_string(i)).c_str(), &st), 0);
    });
  }
  for (auto& th : t) th.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  // What the mount knows keeps working.
  Result<std::string> got = ReadAll(JoinPath(root_, "dir one/sub/deep.dat"));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == files_["dir one/sub/deep.dat"]);
}

TEST_F(MountTest, ChangedOriginFileGivesEioNotMixedBytes) {
  MemAttributes later;
  later.mtime_ns += 1'000'000'000;
  ASSERT_TRUE(origin().AddFile("imgs/1005.jpg", Pattern(5000 + 5 * 311, 999), later).ok());
  UniqueFd fd(::open(JoinPath(root_, "imgs/1005.jpg").c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid());
  char buf[100];
  EXPECT_LT(::pread(fd.get(), buf, sizeof buf, 0), 0);
  EXPECT_EQ(errno, EIO);
}

// `dataset refresh`: new lookups see the new version; a file opened before
// keeps reading its own version: the same bytes if it did not change (read
// through the new version's owners), EIO if it changed and its chunks are
// not held (never the new bytes, never a mix).
TEST_F(MountTest, ARefreshShowsTheNewVersionAndOpenFilesKeepTheirs) {
  UniqueFd same(::open(JoinPath(root_, "imgs/1001.jpg").c_str(), O_RDONLY));
  UniqueFd changed(::open(JoinPath(root_, "imgs/1005.jpg").c_str(), O_RDONLY));
  ASSERT_TRUE(same.valid() && changed.valid());
  struct stat before;
  ASSERT_EQ(::stat(JoinPath(root_, "imgs/1005.jpg").c_str(), &before), 0);

  MemAttributes later;
  later.mtime_ns += 1'000'000'000;
  const std::string fresh = Pattern(7777, 4242);
  ASSERT_TRUE(origin().AddFile("imgs/1005.jpg", fresh, later).ok());
  auto r = coord().RefreshDataset("ds");
  ASSERT_TRUE(r.ok() && r->changed) << r.status().ToString();

  // New lookups: the new version.
  const std::string path = JoinPath(root_, "imgs/1005.jpg");
  ASSERT_TRUE(Eventually([&] {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) == fresh.size();
  }));
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino);
  Result<std::string> got = ReadAll(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == fresh);

  // Files opened before: an unchanged one reads its bytes, from the owners
  // of the new version (the same chunks), not the origin...
  const std::string& want = files_["imgs/1001.jpg"];
  std::string buf(want.size(), '\0');
  const uint64_t origin_before = fs_->reader().counters().origin_bytes.load();
  ASSERT_EQ(::pread(same.get(), buf.data(), buf.size(), 0), ssize_t(want.size())) << std::strerror(errno);
  EXPECT_TRUE(buf == want);
  EXPECT_EQ(fs_->reader().counters().origin_bytes.load(), origin_before);
  // ...and a changed one gets EIO, not the new bytes.
  char small[100];
  EXPECT_LT(::pread(changed.get(), small, sizeof small, 0), 0);
  EXPECT_EQ(errno, EIO);
}

}  // namespace
}  // namespace hoard::fuse
