// NfsOrigin against a real server: nfs-ganesha started by
// tests/lib/nfs_server.sh on a temporary export, compared with the same
// directory read through PosixOrigin.
#include "origin/nfs_origin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/file_util.h"
#include "origin/origin_test_util.h"
#include "origin/posix_origin.h"
#include "testing/nfs_test_server.h"

namespace hoard {
namespace {

using std::chrono::milliseconds;
using origin_testing::BigContent;
using origin_testing::CollectWalk;
using origin_testing::ReadAll;

// Larger than ganesha's 1 MiB READ limit, so reads cross it.
constexpr size_t kBigSize = 5 * 1024 * 1024 + 777;

class NfsOriginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip = NfsTestServer::ShouldSkip();
    if (!skip.empty()) GTEST_SKIP() << skip;
    char tmpl[] = "/tmp/hoard-nfs-origin-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    export_ = base_ + "/export";
    ASSERT_TRUE(MakeDirs(export_).ok());
    ASSERT_TRUE(origin_testing::BuildTree(export_, kBigSize));
    Status s = server_.Start(base_ + "/server", export_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    url_ = server_.url();
  }

  void TearDown() override {
    // Runs even when the test failed: the server must never outlive it.
    Status s = server_.Stop();
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!base_.empty()) (void)RemoveTree(base_);
  }

  // The URL of `sub` (a path below the export) on the running server.
  std::string UrlOf(const std::string& sub) const {
    return "nfs://127.0.0.1:" + std::to_string(server_.port()) + export_ + sub +
           "?mountport=" + std::to_string(server_.mount_port());
  }

  std::unique_ptr<Origin> MustOpen(const std::string& url, OriginOptions options = {}) {
    auto o = OpenOrigin(url, options);
    EXPECT_TRUE(o.ok()) << url << ": " << o.status().ToString();
    return o.ok() ? std::move(*o) : nullptr;
  }

  std::string base_;
  std::string export_;
  std::string url_;
  NfsTestServer server_;
};

TEST_F(NfsOriginTest, WalkAndStatMatchTheLocalTree) {
  auto nfs = MustOpen(url_);
  ASSERT_NE(nfs, nullptr);
  auto local = PosixOrigin::Create(export_);
  ASSERT_TRUE(local.ok());

  auto got = CollectWalk(*nfs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto want = CollectWalk(**local);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(got->size(), want->size());
  for (const auto& [path, w] : *want) {
    ASSERT_TRUE(got->count(path)) << "missing " << path;
    const OriginEntry& g = got->at(path);
    EXPECT_EQ(g.type, w.type) << path;
    EXPECT_EQ(g.mode, w.mode) << path;
    EXPECT_EQ(g.uid, w.uid) << path;
    EXPECT_EQ(g.gid, w.gid) << path;
    EXPECT_EQ(g.size, w.size) << path;
    EXPECT_EQ(g.mtime_ns, w.mtime_ns) << path;
    EXPECT_EQ(g.symlink_target, w.symlink_target) << path;

    auto st = nfs->Stat(path);
    ASSERT_TRUE(st.ok()) << path << ": " << st.status().ToString();
    EXPECT_EQ(st->type, w.type) << path;
    EXPECT_EQ(st->mode, w.mode) << path;
    EXPECT_EQ(st->size, w.size) << path;
    EXPECT_EQ(st->mtime_ns, w.mtime_ns) << path;
    EXPECT_EQ(st->symlink_target, w.symlink_target) << path;
  }
  EXPECT_EQ(got->at("owned").mtime_ns, origin_testing::kOwnedMtimeNs);
  EXPECT_EQ(got->at("owned").uid, 1234u);
  EXPECT_EQ(nfs->Stat("").value().type, EntryType::kDir);
  EXPECT_EQ(nfs->Stat("fifo").status().code(), Code::kInvalidArgument);
}

TEST_F(NfsOriginTest, ReadsAreByteEqualToTheLocalFiles) {
  auto o = NfsOrigin::Create(url_, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  NfsOrigin& nfs = **o;
  EXPECT_EQ(nfs.export_path(), export_);
  EXPECT_EQ(nfs.root_in_export(), "");
  const uint64_t readmax = nfs.read_max();
  ASSERT_GT(readmax, 0u);
  ASSERT_LT(readmax, kBigSize);

  const std::string big = BigContent(kBigSize);
  auto all = ReadAll(nfs, "big.bin", 3 * 1024 * 1024 + 1);  // not a multiple of readmax
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == big);

  auto f = nfs.Open("big.bin");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->attributes().size, kBigSize);
  std::string buf(3 * readmax, '\0');
  // Ranges crossing one and two READ boundaries, and the end of the file.
  for (uint64_t off : {readmax - 100, readmax - 1, uint64_t{12345}, kBigSize - readmax - 5}) {
    auto n = (*f)->ReadAt(off, buf.size(), buf.data());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    size_t want = std::min<size_t>(buf.size(), kBigSize - off);
    ASSERT_EQ(*n, want) << off;
    EXPECT_TRUE(std::string_view(buf.data(), *n) == std::string_view(big).substr(off, want)) << off;
  }
  auto n = (*f)->ReadAt(kBigSize, 10, buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  n = (*f)->ReadAt(kBigSize + 5'000'000, 10, buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  for (const char* path : {"naïve 日本語.bin", "with space.txt", "a/b/deep.txt", "a/empty", "owned"}) {
    auto got = ReadAll(nfs, path, 7);
    ASSERT_TRUE(got.ok()) << path << ": " << got.status().ToString();
    auto want = ReadFile(export_ + "/" + path);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(*got, *want) << path;
  }
}

TEST_F(NfsOriginTest, MissingPathsAreNotFoundAndBadOnesInvalid) {
  auto nfs = MustOpen(url_);
  ASSERT_NE(nfs, nullptr);
  EXPECT_EQ(nfs->Stat("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(nfs->Stat("a/nope/deeper").status().code(), Code::kNotFound);
  EXPECT_EQ(nfs->Open("a/b/nope.txt").status().code(), Code::kNotFound);
  char c;
  EXPECT_EQ(nfs->Read("nope", 0, 1, &c).status().code(), Code::kNotFound);
  auto missing = nfs->Stat("nope");
  EXPECT_NE(missing.status().message().find("127.0.0.1"), std::string::npos) << missing.status().ToString();

  EXPECT_EQ(nfs->Open("link").status().code(), Code::kInvalidArgument);  // a symlink
  EXPECT_EQ(nfs->Open("a").status().code(), Code::kInvalidArgument);     // a directory
  EXPECT_EQ(nfs->Stat("../x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(nfs->Open("a/../../etc/passwd").status().code(), Code::kInvalidArgument);

  // An origin whose root does not exist: the export is found by stripping
  // the missing component, then the root is not there.
  auto r = OpenOrigin(UrlOf("/does/not/exist"));
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
  r = OpenOrigin(UrlOf("/owned"));
  EXPECT_FALSE(r.ok());
}

TEST_F(NfsOriginTest, UrlBelowTheExportIsTheRoot) {
  auto o = NfsOrigin::Create(UrlOf("/a"), {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  auto entries = CollectWalk(**o);
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> paths;
  for (const auto& [p, e] : *entries) paths.push_back(p);
  EXPECT_EQ(paths, (std::vector<std::string>{"b", "b/deep.txt", "empty", "empty dir", "up"}));
  auto got = ReadAll(**o, "b/deep.txt");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "deep");
}

TEST_F(NfsOriginTest, ChangesOnTheServerAreSeen) {
  auto nfs = MustOpen(url_);
  ASSERT_NE(nfs, nullptr);
  ASSERT_TRUE(WriteFileAtomic(export_ + "/new.txt", "fresh").ok());
  auto st = nfs->Stat("new.txt");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, 5u);
  auto entries = CollectWalk(*nfs);
  ASSERT_TRUE(entries.ok());
  EXPECT_TRUE(entries->count("new.txt"));
}

TEST_F(NfsOriginTest, FileReplacedAfterOpenIsStale) {
  OriginOptions options;
  options.max_connections = 1;
  auto nfs = MustOpen(url_, options);
  ASSERT_NE(nfs, nullptr);
  auto f = nfs->Open("with space.txt");
  ASSERT_TRUE(f.ok());
  // Replaced by a new file (new inode) under the same name.
  ASSERT_TRUE(WriteFileAtomic(export_ + "/with space.txt", "other content").ok());
  // Push the old handle out of the connection's handle cache, so that the
  // next ReadAt has to reopen the path.
  for (int i = 0; i < 20; ++i) {
    std::string name = "filler" + std::to_string(i);
    ASSERT_TRUE(WriteFileAtomic(export_ + "/" + name, "x").ok());
    ASSERT_TRUE(nfs->Open(name).ok());
  }
  char buf[32];
  auto n = (*f)->ReadAt(0, sizeof(buf), buf);
  EXPECT_EQ(n.status().code(), Code::kStale) << n.status().ToString();
  auto fresh = ReadAll(*nfs, "with space.txt");
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, "other content");
}

TEST_F(NfsOriginTest, ConcurrentReadsFromEightThreads) {
  OriginOptions options;
  options.max_connections = 4;
  auto nfs = MustOpen(url_, options);
  ASSERT_NE(nfs, nullptr);
  const std::string big = BigContent(kBigSize);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::string buf(1 << 20, '\0');
      for (int i = 0; i < 25; ++i) {
        uint64_t off = rng() % kBigSize;
        size_t len = 1 + rng() % buf.size();
        // Every other read keeps the file open across two ranges.
        auto f = nfs->Open("big.bin");
        if (!f.ok()) {
          ADD_FAILURE() << f.status().ToString();
          ++failures;
          continue;
        }
        for (int k = 0; k < 1 + (i % 2); ++k) {
          uint64_t o = (off + k * 4096) % kBigSize;
          auto n = (*f)->ReadAt(o, len, buf.data());
          size_t want = std::min<size_t>(len, kBigSize - o);
          if (!n.ok() || *n != want || std::string_view(buf.data(), *n) != std::string_view(big).substr(o, want)) {
            ++failures;
          }
        }
        char small[16];
        auto s = nfs->Read("a/b/deep.txt", 0, sizeof(small), small);
        if (!s.ok() || std::string(small, *s) != "deep") ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(NfsOriginTest, OneConnectionServesManyOpenFilesWithoutDeadlock) {
  OriginOptions options;
  options.max_connections = 1;
  auto nfs = MustOpen(url_, options);
  ASSERT_NE(nfs, nullptr);
  std::vector<std::unique_ptr<OriginFile>> files;
  for (const char* p : {"big.bin", "with space.txt", "a/b/deep.txt", "owned"}) {
    auto f = nfs->Open(p);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    files.push_back(std::move(*f));
  }
  // Interleaved, from two threads, while a walk calls back into the origin.
  std::thread other([&] {
    Status s = nfs->Walk([&](const OriginEntry& e) { return nfs->Stat(e.path).status(); });
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  char buf[8];
  for (int round = 0; round < 3; ++round) {
    for (auto& f : files) {
      auto n = f->ReadAt(0, sizeof(buf), buf);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
    }
  }
  other.join();
}

TEST_F(NfsOriginTest, StoppedServerIsUnavailableWithinTheTimeoutAndRecovers) {
  OriginOptions options;
  options.timeout_ms = 1000;
  auto nfs = MustOpen(url_, options);
  ASSERT_NE(nfs, nullptr);
  auto f = nfs->Open("big.bin");
  ASSERT_TRUE(f.ok());
  char buf[4096];
  ASSERT_TRUE((*f)->ReadAt(0, sizeof(buf), buf).ok());

  ASSERT_TRUE(server_.Stop().ok());
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(nfs->Stat("owned").status().code(), Code::kUnavailable);
  EXPECT_EQ((*f)->ReadAt(0, sizeof(buf), buf).status().code(), Code::kUnavailable);
  EXPECT_EQ(nfs->Open("a/b/deep.txt").status().code(), Code::kUnavailable);
  EXPECT_EQ(CollectWalk(*nfs).status().code(), Code::kUnavailable);
  EXPECT_EQ(OpenOrigin(url_, options).status().code(), Code::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5 * options.timeout_ms));

  // The server comes back on the same port: no new origin needed.
  Status s = server_.Restart();
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto st = nfs->Stat("owned");
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  auto n = (*f)->ReadAt(0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string_view(buf, *n), std::string_view(BigContent(sizeof(buf))));
}

TEST_F(NfsOriginTest, FrozenServerTimesOutInsteadOfHanging) {
  OriginOptions options;
  options.timeout_ms = 700;
  auto nfs = MustOpen(url_, options);
  ASSERT_NE(nfs, nullptr);
  auto f = nfs->Open("big.bin");
  ASSERT_TRUE(f.ok());

  ASSERT_TRUE(server_.Pause().ok());
  // The kernel still accepts TCP connections for a stopped process, so each
  // of these waits for RPC answers that never come.
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(nfs->Stat("owned").status().code(), Code::kUnavailable);
  auto one = std::chrono::steady_clock::now() - start;
  EXPECT_GE(one, milliseconds(options.timeout_ms - 50));
  EXPECT_LT(one, milliseconds(3 * options.timeout_ms));
  char buf[100];
  EXPECT_EQ((*f)->ReadAt(0, sizeof(buf), buf).status().code(), Code::kUnavailable);
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(OpenOrigin(url_, options).status().code(), Code::kUnavailable);  // mount under our own deadline
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3 * options.timeout_ms));

  ASSERT_TRUE(server_.Resume().ok());
  auto st = nfs->Stat("owned");
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE((*f)->ReadAt(0, sizeof(buf), buf).ok());
}

TEST_F(NfsOriginTest, NoServerIsUnavailable) {
  // A port pair nothing listens on (the server's, after stopping it).
  ASSERT_TRUE(server_.Stop().ok());
  OriginOptions options;
  options.timeout_ms = 1000;
  auto start = std::chrono::steady_clock::now();
  auto r = OpenOrigin(url_, options);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  // Without mountport, MOUNT is looked up through the portmapper.
  r = OpenOrigin("nfs://127.0.0.1:" + std::to_string(server_.port()) + export_, options);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3 * options.timeout_ms));
}

// Reports sequential read throughput over loopback (informational).
TEST_F(NfsOriginTest, SequentialThroughput) {
  constexpr size_t kSize = 64 << 20;
  ASSERT_TRUE(WriteFileAtomic(export_ + "/throughput.bin", origin_testing::RandomBytes(kSize, 7)).ok());
  auto nfs = MustOpen(url_);
  ASSERT_NE(nfs, nullptr);
  auto f = nfs->Open("throughput.bin");
  ASSERT_TRUE(f.ok());
  std::string buf(4 << 20, '\0');
  auto start = std::chrono::steady_clock::now();
  uint64_t total = 0;
  while (total < kSize) {
    auto n = (*f)->ReadAt(total, buf.size(), buf.data());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_GT(*n, 0u);
    total += *n;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double mbps = total / secs / 1e6;
  RecordProperty("throughput_MBps", static_cast<int>(mbps));
  std::printf("[ info ] NFS loopback sequential read: %.0f MB/s (%zu MiB in %.3f s, 4 MiB ReadAt)\n", mbps,
              kSize >> 20, secs);
}

// Without ports in the URL, libnfs asks the portmapper. Needs port 111, so
// it runs only where no rpcbind holds it (a fresh CI machine does not).
TEST(NfsOriginPortmapTest, PortlessUrlGoesThroughThePortmapper) {
  std::string skip = NfsTestServer::ShouldSkip();
  if (!skip.empty()) GTEST_SKIP() << skip;
  char tmpl[] = "/tmp/hoard-nfs-portmap-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string base = tmpl;
  ASSERT_TRUE(MakeDirs(base + "/export/d").ok());
  ASSERT_TRUE(WriteFileAtomic(base + "/export/d/f", "via portmapper").ok());
  NfsTestServer server;
  Status s = server.Start(base + "/server", base + "/export", 0, "NFS_SERVER_PORTMAP=1");
  if (!s.ok() && s.message().find("port 111") != std::string::npos) {
    (void)RemoveTree(base);
    GTEST_SKIP() << s.ToString();
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  {
    auto o = OpenOrigin("nfs://127.0.0.1" + base + "/export");
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    char buf[32];
    auto n = (*o)->Read("d/f", 0, sizeof(buf), buf);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(std::string(buf, *n), "via portmapper");
    // Only the NFS port given: MOUNT still comes from the portmapper.
    o = OpenOrigin("nfs://127.0.0.1:" + std::to_string(server.port()) + base + "/export");
    ASSERT_TRUE(o.ok()) << o.status().ToString();
  }
  EXPECT_TRUE(server.Stop().ok());
  (void)RemoveTree(base);
}

}  // namespace
}  // namespace hoard
