#include "node/scrubber.h"

#include "common/clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/mutex.h"
#include "common/hash.h"
#include "common/testing.h"

namespace hoard {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

ChunkKey Key(uint64_t file, uint32_t index = 0) {
  ChunkKey k;
  k.file.lo = file * 0x9E3779B97F4A7C15ULL;
  k.file.hi = ~file * 0xC2B2AE3D27D4EB4FULL;
  k.index = index;
  return k;
}

// Flips a byte on the disk and drops the file's cached pages: bit rot.
void Rot(const std::string& path, off_t offset) {
  UniqueFd fd(::open(path.c_str(), O_RDWR));
  ASSERT_TRUE(fd.valid()) << path;
  char c = 0;
  ASSERT_EQ(::pread(fd.get(), &c, 1, offset), 1);
  c ^= 0x21;
  ASSERT_EQ(::pwrite(fd.get(), &c, 1, offset), 1);
  ASSERT_EQ(::fdatasync(fd.get()), 0);
  ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
}

class ScrubberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *ChunkStore::Open({.dir = tmp_.Sub("store"), .logger = log_, .on_corrupt = [this](const ChunkKey& k,
                                                                                               uint64_t) {
                                  MutexLock lock(&mu_);
                                  told_.push_back(k);
                                }});
    tier_ = *ChunkStore::Open({.dir = JoinPath(store_->dir(), "read-tier"), .logger = log_});
    replicas_ = *ReplicaStore::Open({.dir = JoinPath(store_->dir(), "ckpt"), .logger = log_});
  }

  std::unique_ptr<Scrubber> Make(std::chrono::seconds interval = 0s, Clock* clock = Clock::Real()) {
    Result<std::unique_ptr<Scrubber>> s =
        Scrubber::Create({.store = store_.get(),
                          .replicas = replicas_.get(),
                          .read_tier_dir = tier_->dir(),
                          .state_path = tmp_.Sub("scrub.state"),
                          .interval = interval,
                          .rate_bytes_per_s = 0,
                          .on_replica_lost = [this] { ++replicas_lost_; },
                          .logger = log_,
                          .clock = clock});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }

  testing::TempDir tmp_{"hoard-scrubber"};
  std::shared_ptr<spdlog::logger> log_ = spdlog::null_logger_mt("scrub-" + std::to_string(++n_));
  std::unique_ptr<ChunkStore> store_, tier_;
  std::unique_ptr<ReplicaStore> replicas_;
  Mutex mu_;
  std::vector<ChunkKey> told_;
  std::atomic<int> replicas_lost_{0};
  static inline int n_ = 0;
};

// One pass finds rot in each kind of file, quarantines it, tells its owner,
// and leaves the good files alone.
TEST_F(ScrubberTest, APassFindsRotInEveryKindOfChunkFile) {
  const std::string a = testing::PseudoRandomBytes(3 << 20, 1), b = testing::PseudoRandomBytes(100'000, 2);
  ASSERT_TRUE(store_->Put(Key(1), 9, a).ok());
  ASSERT_TRUE(store_->Put(Key(2), 9, b).ok());
  ASSERT_TRUE(tier_->Put(Key(3), 9, b).ok());
  ASSERT_TRUE(tier_->Put(Key(4), 9, a).ok());
  ASSERT_TRUE(replicas_->Put(5, 1, 0, Checksum64(b.data(), b.size()), b).ok());
  ASSERT_TRUE(replicas_->Put(5, 1, 1, Checksum64(a.data(), a.size()), a).ok());
  Rot(ChunkStore::ChunkPath(store_->dir(), Key(1)), (2 << 20) + 3);
  Rot(ChunkStore::ChunkPath(tier_->dir(), Key(3)), 17);
  Rot(replicas_->ChunkPath(5, 1, 1, Checksum64(a.data(), a.size())), 1000);

  std::unique_ptr<Scrubber> s = Make();
  s->Start();
  const uint64_t pass = s->RequestPass();
  ASSERT_TRUE(s->WaitPass(pass, 30s));
  const Scrubber::Progress p = s->progress();
  EXPECT_EQ(p.pass, pass);
  EXPECT_FALSE(p.running);
  EXPECT_EQ(p.pass_items, 6u);
  EXPECT_EQ(p.pass_items_done, 6u);
  EXPECT_EQ(p.corrupt_found, 3u);
  EXPECT_GT(p.last_pass_end_unix, 0);
  EXPECT_FALSE(store_->Contains(Key(1)));
  EXPECT_TRUE(store_->Contains(Key(2)));
  {
    MutexLock lock(&mu_);
    ASSERT_EQ(told_.size(), 1u);
    EXPECT_EQ(told_[0], Key(1));
  }
  EXPECT_EQ(replicas_lost_.load(), 1);
  EXPECT_FALSE(fs::exists(ChunkStore::ChunkPath(tier_->dir(), Key(3))));
  EXPECT_TRUE(fs::exists(ChunkStore::ChunkPath(tier_->dir(), Key(4))));
  EXPECT_FALSE(replicas_->HasReplica(5, 1, 1, Checksum64(a.data(), a.size())));
  EXPECT_TRUE(replicas_->HasReplica(5, 1, 0, Checksum64(b.data(), b.size())));
  size_t quarantined = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(store_->quarantine_dir())) ++quarantined;
  EXPECT_EQ(quarantined, 3u);

  // A second pass finds nothing new.
  const uint64_t again = s->RequestPass();
  EXPECT_EQ(again, pass + 1);
  ASSERT_TRUE(s->WaitPass(again, 30s));
  EXPECT_EQ(s->progress().corrupt_found, 3u);
  EXPECT_EQ(s->progress().passes_done, 2u);
}

// A pass stopped half way resumes after the last file it checked, in the
// next process, under the same number; the schedule survives restarts.
TEST_F(ScrubberTest, AStoppedPassResumesWhereItStopped) {
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(store_->Put(Key(10 + i), 9, std::string(1000, char('a' + i))).ok());
  // What a process that checked three files before it stopped left behind.
  std::vector<std::string> names;
  store_->ForEach([&](const ChunkKey& k, uint64_t, uint64_t) { names.push_back("s/" + k.Name()); });
  std::sort(names.begin(), names.end());
  // (It started an hour ago, so the next one is not due for a week.)
  const int64_t started = int64_t(std::time(nullptr)) - 3600;
  ASSERT_TRUE(WriteFileAtomic(tmp_.Sub("scrub.state"), "pass 4\nrunning 1\nstarted " + std::to_string(started) +
                                                           "\nlast_end " + std::to_string(started - 7 * 86400) +
                                                           "\npasses_done 3\ncorrupt 2\ncursor " + names[2] + "\n")
                  .ok());
  std::unique_ptr<Scrubber> s = Make(7 * 24h);
  s->Start();
  ASSERT_TRUE(s->WaitPass(4, 30s));
  const Scrubber::Progress p = s->progress();
  EXPECT_EQ(p.pass, 4u) << "the same pass, not a new one";
  EXPECT_EQ(p.items_scrubbed, 3u) << "only the files after the cursor";
  EXPECT_EQ(p.pass_items_done, 6u);
  EXPECT_EQ(p.passes_done, 4u);
  EXPECT_EQ(p.corrupt_found, 2u) << "counts carry over";
  s->Stop();
  // And the next process knows the pass ended: nothing is due for a week.
  Result<std::string> state = ReadFile(tmp_.Sub("scrub.state"));
  ASSERT_TRUE(state.ok());
  EXPECT_NE(state->find("running 0"), std::string::npos) << *state;
}

// With an interval, the first pass of a node starts by itself.
TEST_F(ScrubberTest, TheFirstPassStartsByItself) {
  ASSERT_TRUE(store_->Put(Key(1), 9, std::string(1000, 'x')).ok());
  std::unique_ptr<Scrubber> s = Make(3600s);
  s->Start();
  ASSERT_TRUE(s->WaitPass(1, 30s));
  EXPECT_EQ(s->progress().items_scrubbed, 1u);
}

// The next pass is due `interval` after the last one started, by the
// injected clock: an hour is a step of the test.
TEST_F(ScrubberTest, TheNextPassStartsWhenTheIntervalHasPassed) {
  ASSERT_TRUE(store_->Put(Key(1), 9, std::string(1000, 'x')).ok());
  FakeClock clock;
  std::unique_ptr<Scrubber> s = Make(3600s, &clock);
  s->Start();
  ASSERT_TRUE(s->WaitPass(1, 30s));
  EXPECT_EQ(s->progress().pass_started_unix, clock.WallSeconds());
  clock.Advance(3600s);
  ASSERT_TRUE(s->WaitPass(2, 30s));
  EXPECT_EQ(s->progress().items_scrubbed, 2u);
  EXPECT_EQ(s->progress().passes_done, 2u);
}

TEST(ScrubberPaceTest, TheBucketHoldsTheRate) {
  Scrubber::Bucket b;
  const auto t0 = std::chrono::steady_clock::time_point(std::chrono::seconds(100));
  const uint64_t rate = 10 << 20;
  // The first read starts with an empty bucket: 5 MiB at 10 MiB/s is a half
  // second's debt.
  EXPECT_EQ(Scrubber::Pace(&b, rate, 5 << 20, t0), std::chrono::milliseconds(500));
  // Waited off: the next 5 MiB costs another half second.
  EXPECT_EQ(Scrubber::Pace(&b, rate, 5 << 20, t0 + 500ms), std::chrono::milliseconds(500));
  // After a long idle spell at most one second's worth is saved up.
  EXPECT_EQ(Scrubber::Pace(&b, rate, 10 << 20, t0 + 100s), std::chrono::nanoseconds(0));
  EXPECT_EQ(Scrubber::Pace(&b, rate, 10 << 20, t0 + 100s), std::chrono::seconds(1));
  EXPECT_EQ(Scrubber::Pace(&b, 0, 1 << 30, t0), std::chrono::nanoseconds(0)) << "0 = unlimited";
}

}  // namespace
}  // namespace hoard
