// The mount on a real kernel FUSE mount, over an in-process cluster: a
// coordinator, three node agents on loopback ZeroMQ, and an in-memory origin.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "fuse/hoard_fs.h"
#include "fuse/test_mount.h"
#include "node/test_cluster.h"

namespace hoard::fuse {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
constexpr uint64_t kChunk = 65536;

std::string Pattern(size_t n, int seed) { return hoard::testing::PseudoRandomBytes(n, seed); }

Result<std::string> ReadAll(const std::string& path) { return ReadFile(path); }

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

    fs_ = std::make_unique<HoardFs>(HoardFs::Options{.coordinator = cluster_->endpoint(),
                                                     .local_store = JoinPath(dir_, "node1/store"),
                                                     .cache_dir = JoinPath(dir_, "mount-cache"),
                                                     .poll_interval = 100ms,
                                                     .peer_timeout = 2000ms,
                                                     .peer_connect_timeout = 300ms,
                                                     .logger = cluster_->logger(),
                                                     .context = &cluster_->zmq(),
                                                     .open_origin = cluster_->opener()});
    ASSERT_TRUE(fs_->Start().ok());
    mnt_ = JoinPath(dir_, "mnt");
    ASSERT_TRUE(MakeDirs(mnt_).ok());
    mount_ = std::make_unique<TestMount>(fs_.get(), mnt_);
    ASSERT_TRUE(mount_->ok()) << "cannot mount FUSE here";
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
  // skipped until the map marks it down.
  EXPECT_LT(took, 2s);
  EXPECT_GT(fs_->reader().counters().origin_bytes.load(), 0u);
}

TEST_F(MountTest, WritesAreRefusedReadOnly) {
  int fd = ::open(JoinPath(root_, "big.bin").c_str(), O_WRONLY);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  fd = ::open(JoinPath(root_, "new.txt").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::mkdir(JoinPath(root_, "newdir").c_str(), 0755), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::unlink(JoinPath(root_, "empty").c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::rename(JoinPath(root_, "empty").c_str(), JoinPath(root_, "e2").c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::truncate(JoinPath(root_, "big.bin").c_str(), 0), 0);
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
  WarmAll();
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
  UniqueFd fd(::open(JoinPath(root_, "big.bin").c_str(), O_RDONLY | O_DIRECT));
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
    peak = std::max(peak, count_fds());
  }
  ::free(buf);
  EXPECT_TRUE(got == files_["big.bin"]);
  // At most OpenFile::kRecent chunk files for the handle (21 chunks read).
  EXPECT_LE(peak, before + 4);
  EXPECT_GT(peak, before) << "node1's chunks were read from its store";
}

TEST_F(MountTest, AFileGoneFromTheOriginIsEioNotEnoent) {
  ASSERT_TRUE(origin().Remove("imgs/1007.jpg").ok());
  UniqueFd fd(::open(JoinPath(root_, "imgs/1007.jpg").c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid()) << "the name is in the pinned manifest";
  char buf[100];
  EXPECT_LT(::pread(fd.get(), buf, sizeof buf, 0), 0);
  EXPECT_EQ(errno, EIO);
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

}  // namespace
}  // namespace hoard::fuse
