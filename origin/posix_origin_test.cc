#include "origin/posix_origin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <atomic>
#include <set>
#include <thread>

#include "common/file_util.h"
#include "origin/origin_test_util.h"

namespace hoard {
namespace {

using origin_testing::AllBytes;
using origin_testing::BigContent;
using origin_testing::CollectWalk;
using origin_testing::ExpectedTree;
using origin_testing::ReadAll;

constexpr size_t kBigSize = 3 * 1024 * 1024 + 12345;

class PosixOriginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hoard-posix-origin-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(origin_testing::BuildTree(dir_, kBigSize));
    auto o = OpenOrigin(dir_);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    origin_ = std::move(*o);
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  std::string dir_;
  std::unique_ptr<Origin> origin_;
};

TEST_F(PosixOriginTest, WalkReturnsExactlyTheTreeWithAttributes) {
  auto entries = CollectWalk(*origin_);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::map<std::string, EntryType> got;
  for (const auto& [path, e] : *entries) got[path] = e.type;
  EXPECT_EQ(got, ExpectedTree());  // no fifo, no "", nothing from /etc

  for (const auto& [path, e] : *entries) {
    struct stat st;
    ASSERT_EQ(::lstat((dir_ + "/" + path).c_str(), &st), 0) << path;
    EXPECT_EQ(e.mode, st.st_mode) << path;
    EXPECT_EQ(e.uid, st.st_uid) << path;
    EXPECT_EQ(e.gid, st.st_gid) << path;
    EXPECT_EQ(e.mtime_ns, st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec) << path;
    if (e.type == EntryType::kFile) {
      EXPECT_EQ(e.size, static_cast<uint64_t>(st.st_size)) << path;
    }
    if (e.type == EntryType::kDir) {
      EXPECT_EQ(e.size, 0u) << path;
    }
  }
  const OriginEntry& owned = entries->at("owned");
  EXPECT_EQ(owned.mode, S_IFREG | 0600u);
  EXPECT_EQ(owned.mtime_ns, origin_testing::kOwnedMtimeNs);
  if (::geteuid() == 0) {
    EXPECT_EQ(owned.uid, 1234u);
    EXPECT_EQ(owned.gid, 5678u);
  }
  EXPECT_EQ(entries->at("link").symlink_target, "a/b/deep.txt");
  EXPECT_EQ(entries->at("link").size, std::string("a/b/deep.txt").size());
  EXPECT_EQ(entries->at("escape").symlink_target, "/etc");
  EXPECT_EQ(entries->at("a/empty").size, 0u);
  EXPECT_EQ(entries->at("big.bin").size, kBigSize);
}

TEST_F(PosixOriginTest, WalkVisitsDirectoriesBeforeTheirChildren) {
  std::set<std::string> seen;
  Status s = origin_->Walk([&](const OriginEntry& e) {
    size_t slash = e.path.rfind('/');
    if (slash != std::string::npos && !seen.count(e.path.substr(0, slash))) {
      return Status::Internal("child before parent: " + e.path);
    }
    seen.insert(e.path);
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(PosixOriginTest, WalkStopsAtTheFirstVisitorError) {
  int calls = 0;
  Status s = origin_->Walk([&](const OriginEntry&) {
    ++calls;
    return Status::Stale("enough");
  });
  EXPECT_EQ(s.code(), Code::kStale);
  EXPECT_EQ(calls, 1);
}

TEST_F(PosixOriginTest, StatMatchesWalk) {
  auto entries = CollectWalk(*origin_);
  ASSERT_TRUE(entries.ok());
  for (const auto& [path, e] : *entries) {
    auto st = origin_->Stat(path);
    ASSERT_TRUE(st.ok()) << path << ": " << st.status().ToString();
    EXPECT_EQ(st->path, path);
    EXPECT_EQ(st->type, e.type) << path;
    EXPECT_EQ(st->mode, e.mode) << path;
    EXPECT_EQ(st->size, e.size) << path;
    EXPECT_EQ(st->mtime_ns, e.mtime_ns) << path;
    EXPECT_EQ(st->symlink_target, e.symlink_target) << path;
  }
  auto root = origin_->Stat("");
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->type, EntryType::kDir);
  EXPECT_EQ(root->path, "");
}

TEST_F(PosixOriginTest, ReadsAtOffsetsIncludingPastEnd) {
  const std::string big = BigContent(kBigSize);
  auto f = origin_->Open("big.bin");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->attributes().size, kBigSize);
  EXPECT_EQ((*f)->attributes().path, "big.bin");

  std::string buf(1 << 20, '\0');
  for (uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{1 << 20}, uint64_t{kBigSize - 10}}) {
    auto n = (*f)->ReadAt(off, buf.size(), buf.data());
    ASSERT_TRUE(n.ok());
    size_t want = std::min<size_t>(buf.size(), kBigSize - off);
    ASSERT_EQ(*n, want) << off;
    EXPECT_EQ(std::string(buf.data(), *n), big.substr(off, want)) << off;
  }
  auto n = (*f)->ReadAt(kBigSize, 100, buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  n = (*f)->ReadAt(kBigSize + 1'000'000, 100, buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  n = (*f)->ReadAt(5, 0, buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  auto all = ReadAll(*origin_, "naïve 日本語.bin", 100);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, AllBytes());
  auto empty = ReadAll(*origin_, "a/empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");

  char small[16];
  auto r = origin_->Read("with space.txt", 6, sizeof(small), small);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::string(small, *r), "world\n");
}

TEST_F(PosixOriginTest, MissingPathsAreNotFound) {
  EXPECT_EQ(origin_->Stat("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Stat("a/nope").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Stat("nope/deeper").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Open("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Open("a/b/nope.txt").status().code(), Code::kNotFound);
  // A file used as a directory.
  EXPECT_EQ(origin_->Stat("owned/x").status().code(), Code::kNotFound);
  char c;
  EXPECT_EQ(origin_->Read("nope", 0, 1, &c).status().code(), Code::kNotFound);
}

TEST_F(PosixOriginTest, TraversalAttemptsAreRejected) {
  for (const char* bad : {"..", "../etc/passwd", "a/../../etc/passwd", "/etc/passwd", "a/./b", "a//b", "a/"}) {
    EXPECT_EQ(origin_->Stat(bad).status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(origin_->Open(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST_F(PosixOriginTest, SymlinksAreNeverFollowed) {
  // "escape" points at /etc and "a/up" at the root's parent: reaching
  // through them must fail, whatever they point at.
  EXPECT_EQ(origin_->Stat("escape/passwd").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Open("escape/passwd").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Stat("a/up/a").status().code(), Code::kNotFound);
  // A symlink itself is stat'ed, not its target, and cannot be opened.
  auto link = origin_->Stat("link");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->type, EntryType::kSymlink);
  EXPECT_EQ(origin_->Open("link").status().code(), Code::kInvalidArgument);
}

TEST_F(PosixOriginTest, SpecialFilesAndDirectoriesCannotBeOpened) {
  // Must not block on the fifo.
  EXPECT_EQ(origin_->Open("fifo").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_->Stat("fifo").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_->Open("a").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_->Open("").status().code(), Code::kInvalidArgument);
}

TEST_F(PosixOriginTest, OpenFileKeepsReadingAfterUnlink) {
  auto f = origin_->Open("with space.txt");
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(::unlink((dir_ + "/with space.txt").c_str()), 0);
  char buf[32];
  auto n = (*f)->ReadAt(0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "hello world\n");
  EXPECT_EQ(origin_->Stat("with space.txt").status().code(), Code::kNotFound);
}

TEST_F(PosixOriginTest, ConcurrentReadsFromManyThreads) {
  const std::string big = BigContent(kBigSize);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::string buf(100'000, '\0');
      for (int i = 0; i < 50; ++i) {
        uint64_t off = (static_cast<uint64_t>(t) * 7919 + i * 104729) % kBigSize;
        auto n = origin_->Read("big.bin", off, buf.size(), buf.data());
        if (!n.ok() || std::string(buf.data(), *n) != big.substr(off, buf.size())) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace hoard
