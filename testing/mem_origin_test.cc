#include "testing/mem_origin.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "origin/origin_test_util.h"

namespace hoard {
namespace {

using std::chrono::milliseconds;
using origin_testing::CollectWalk;
using origin_testing::ReadAll;

class MemOriginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(origin_.AddFile("train/0001.jpg", "jpeg-bytes-1").ok());
    ASSERT_TRUE(origin_.AddFile("train/0002.jpg", "jpeg-bytes-2", {.perm = 0600, .uid = 7, .gid = 8, .mtime_ns = 99})
                    .ok());
    ASSERT_TRUE(origin_.AddDir("val", {.perm = 0700}).ok());
    ASSERT_TRUE(origin_.AddSymlink("latest", "train").ok());
    ASSERT_TRUE(origin_.AddFile("empty", "").ok());
  }

  MemOrigin origin_;
};

TEST_F(MemOriginTest, WalkStatAndReadSeeTheContent) {
  auto entries = CollectWalk(origin_);
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> paths;
  for (const auto& [p, e] : *entries) paths.push_back(p);
  EXPECT_EQ(paths, (std::vector<std::string>{"empty", "latest", "train", "train/0001.jpg", "train/0002.jpg", "val"}));

  const OriginEntry& f = entries->at("train/0002.jpg");
  EXPECT_EQ(f.type, EntryType::kFile);
  EXPECT_EQ(f.mode, S_IFREG | 0600u);
  EXPECT_EQ(f.uid, 7u);
  EXPECT_EQ(f.gid, 8u);
  EXPECT_EQ(f.mtime_ns, 99);
  EXPECT_EQ(f.size, 12u);
  EXPECT_EQ(entries->at("train").mode, S_IFDIR | 0755u);  // created as a parent
  EXPECT_EQ(entries->at("val").mode, S_IFDIR | 0700u);
  EXPECT_EQ(entries->at("train/0001.jpg").mode, S_IFREG | 0644u);
  EXPECT_EQ(entries->at("latest").type, EntryType::kSymlink);
  EXPECT_EQ(entries->at("latest").symlink_target, "train");
  EXPECT_EQ(entries->at("latest").size, 5u);

  auto st = origin_.Stat("train/0001.jpg");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, 12u);
  EXPECT_EQ(origin_.Stat("").value().type, EntryType::kDir);

  char buf[8];
  auto n = origin_.Read("train/0001.jpg", 5, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "bytes-1");
  n = origin_.Read("train/0001.jpg", 100, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST_F(MemOriginTest, ErrorsMatchARealOrigin) {
  EXPECT_EQ(origin_.Stat("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_.Open("train/nope").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_.Open("train").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_.Open("latest").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_.Stat("../x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_.AddFile("train/0001.jpg/x", "").code(), Code::kInvalidArgument);  // parent is a file
  EXPECT_EQ(origin_.AddFile("", "").code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_.AddFile("train", "").code(), Code::kInvalidArgument);  // non-empty directory
  EXPECT_EQ(origin_.Remove("nope").code(), Code::kNotFound);
}

TEST_F(MemOriginTest, ReplaceIsSeenByOpenFilesAndRemoveIsNot) {
  auto f = origin_.Open("train/0001.jpg");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(origin_.AddFile("train/0001.jpg", "rewritten").ok());
  auto all = ReadAll(origin_, "train/0001.jpg");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, "rewritten");
  char buf[32];
  auto n = (*f)->ReadAt(0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "rewritten");
  EXPECT_EQ((*f)->attributes().size, 12u);  // as of the open

  ASSERT_TRUE(origin_.Remove("train").ok());
  EXPECT_EQ(origin_.Stat("train/0001.jpg").status().code(), Code::kNotFound);
  n = (*f)->ReadAt(0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "rewritten");
}

TEST_F(MemOriginTest, PathFaultsCoverThePathAndBelow) {
  origin_.FailPath("train", Status::Unavailable("nfs down"));
  EXPECT_EQ(origin_.Stat("train").status().code(), Code::kUnavailable);
  EXPECT_EQ(origin_.Stat("train/0001.jpg").status().code(), Code::kUnavailable);
  EXPECT_EQ(origin_.Open("train/0002.jpg").status().code(), Code::kUnavailable);
  EXPECT_TRUE(origin_.Stat("val").ok());
  EXPECT_TRUE(origin_.Stat("").ok());
  // Walk fails when it reaches the path, after visiting what came before.
  EXPECT_EQ(CollectWalk(origin_).status().code(), Code::kUnavailable);

  // The most specific fault wins.
  origin_.FailPath("train/0001.jpg", Status::IoError("bad sector"));
  EXPECT_EQ(origin_.Stat("train/0001.jpg").status().code(), Code::kIoError);
  EXPECT_EQ(origin_.Stat("train/0002.jpg").status().code(), Code::kUnavailable);

  origin_.ClearFaults();
  EXPECT_TRUE(origin_.Stat("train/0001.jpg").ok());
  EXPECT_TRUE(CollectWalk(origin_).ok());
}

TEST_F(MemOriginTest, FaultsHitFilesOpenedBeforehand) {
  auto f = origin_.Open("train/0001.jpg");
  ASSERT_TRUE(f.ok());
  origin_.FailPath("train/0001.jpg", Status::Stale("changed"));
  char buf[4];
  EXPECT_EQ((*f)->ReadAt(0, 4, buf).status().code(), Code::kStale);
  origin_.ClearFaults();
  EXPECT_TRUE((*f)->ReadAt(0, 4, buf).ok());
}

TEST_F(MemOriginTest, CountedFaultsExpire) {
  origin_.FailPath("train/0001.jpg", Status::Unavailable("blip"), /*times=*/2);
  char buf[4];
  EXPECT_EQ(origin_.Read("train/0001.jpg", 0, 4, buf).status().code(), Code::kUnavailable);  // fails the Open
  EXPECT_EQ(origin_.Stat("train/0001.jpg").status().code(), Code::kUnavailable);
  EXPECT_TRUE(origin_.Read("train/0001.jpg", 0, 4, buf).ok());

  origin_.FailAll(Status::IoError("everything"), /*times=*/1);
  EXPECT_EQ(origin_.Stat("val").status().code(), Code::kIoError);
  EXPECT_TRUE(origin_.Stat("val").ok());

  origin_.FailAll(Status::Unavailable("down"));
  EXPECT_EQ(CollectWalk(origin_).status().code(), Code::kUnavailable);
  EXPECT_EQ(origin_.Stat("").status().code(), Code::kUnavailable);
  origin_.ClearFaults();
  EXPECT_TRUE(origin_.Stat("").ok());
}

TEST_F(MemOriginTest, CountersCountCallsAndBytes) {
  char buf[4];
  auto f = origin_.Open("train/0001.jpg");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->ReadAt(0, 4, buf).ok());
  ASSERT_TRUE((*f)->ReadAt(10, 4, buf).ok());  // 2 bytes left
  ASSERT_TRUE(origin_.Read("train/0002.jpg", 0, 4, buf).ok());
  EXPECT_EQ(origin_.OpenCount("train/0001.jpg"), 1u);
  EXPECT_EQ(origin_.ReadCount("train/0001.jpg"), 2u);
  EXPECT_EQ(origin_.BytesRead("train/0001.jpg"), 6u);
  EXPECT_EQ(origin_.ReadCount("train/0002.jpg"), 1u);
  EXPECT_EQ(origin_.ReadCount("val"), 0u);
  EXPECT_EQ(origin_.TotalReadCount(), 3u);
  EXPECT_EQ(origin_.TotalBytesRead(), 10u);

  origin_.FailPath("train/0002.jpg", Status::IoError("x"));
  EXPECT_FALSE(origin_.Read("train/0002.jpg", 0, 4, buf).ok());
  EXPECT_EQ(origin_.OpenCount("train/0002.jpg"), 2u);  // failed calls count

  origin_.ResetCounters();
  EXPECT_EQ(origin_.ReadCount("train/0001.jpg"), 0u);
  EXPECT_EQ(origin_.TotalReadCount(), 0u);
}

TEST_F(MemOriginTest, DelayAppliesToEveryCallAndCallsOverlap) {
  origin_.SetDelay(milliseconds(100));
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(origin_.Stat("val").ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));

  // Four concurrent Stats take about one delay, not four: the sleep happens
  // outside the lock.
  start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { EXPECT_TRUE(origin_.Stat("val").ok()); });
  for (auto& t : threads) t.join();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, milliseconds(100));
  EXPECT_LT(elapsed, milliseconds(350));

  origin_.SetDelay(std::chrono::nanoseconds(0));
  start = std::chrono::steady_clock::now();
  EXPECT_TRUE(origin_.Stat("val").ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(100));
}

TEST_F(MemOriginTest, WalkVisitorMayCallBackIntoTheOrigin) {
  Status s = origin_.Walk([&](const OriginEntry& e) { return origin_.Stat(e.path).status(); });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(MemOriginTest, ManyThreadsReadWhileContentChanges) {
  ASSERT_TRUE(origin_.AddFile("hot", "a").ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 6; ++t) {
    readers.emplace_back([&] {
      char buf[64];
      while (!stop) {
        auto n = origin_.Read("hot", 0, sizeof(buf), buf);
        ++reads;
        if (n.ok()) {
          std::string got(buf, *n);
          if (got != std::string(got.size(), got.empty() ? 'a' : got[0])) ++bad;  // never torn
        } else {
          ++bad;
        }
      }
    });
  }
  // Rewrites until the readers have overlapped with plenty of them.
  for (int i = 0; i < 2000 || reads < 2000; ++i) {
    ASSERT_TRUE(origin_.AddFile("hot", std::string(1 + i % 60, static_cast<char>('a' + i % 26))).ok());
    if (i % 100 == 0) std::this_thread::yield();
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(origin_.ReadCount("hot"), 0u);
}

}  // namespace
}  // namespace hoard
