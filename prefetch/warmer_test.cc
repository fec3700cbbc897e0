#include "prefetch/warmer.h"

#include <atomic>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "prefetch/prefetch_test_util.h"
#include "striping/assignment.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

class WarmerTest : public PrefetchTest {
 protected:
  std::shared_ptr<const std::vector<ChunkRef>> AllChunks() {
    auto v = std::make_shared<std::vector<ChunkRef>>();
    ForEachChunk(view_->manifest, [&](const ChunkRef& c) { v->push_back(c); });
    return v;
  }
  std::map<std::string, std::string> Files(int n) {
    std::map<std::string, std::string> f;
    for (int i = 0; i < n; ++i) f["d/f" + std::to_string(i)] = std::string(1000 + i, char('a' + i % 26));
    return f;
  }
  // Counts the warmer's "nothing left to fetch" calls: each means every job
  // taken has finished and the rest waits for time to pass.
  void CountIdle(Warmer* w) {
    w->SetOnIdle([this] { idle_.fetch_add(1); });
  }
  // Waits for the next idle call after `seen` of them.
  bool IdleAfter(int seen) {
    return Eventually([&] { return idle_.load() > seen; });
  }
  std::atomic<int> idle_{0};
};

TEST_F(WarmerTest, FetchesEveryTargetChunkOnce) {
  MakeDataset(Files(50));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  Warmer w(&filler, store.get(), {.threads = 3, .logger = log_});
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] { return store->usage().chunks == 50; }));
  EXPECT_EQ(origin_->TotalReadCount(), 50u);
  EXPECT_EQ(w.fetched_chunks(), 50u);
  EXPECT_TRUE(w.Failures(42).empty());
}

TEST_F(WarmerTest, ResumesWithoutRefetchingWhatIsCached) {
  MakeDataset(Files(30));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  auto chunks = AllChunks();
  for (int i = 0; i < 20; ++i) {  // a warm-up that got two thirds through
    ASSERT_TRUE(filler.Fill(*view_, (*chunks)[i], true).ok());
  }
  origin_->ResetCounters();
  Warmer w(&filler, store.get(), {.threads = 2, .logger = log_});
  w.Start();
  w.SetTargets({{view_, chunks}});
  ASSERT_TRUE(Eventually([&] { return store->usage().chunks == 30; }));
  EXPECT_EQ(origin_->TotalReadCount(), 10u);
}

TEST_F(WarmerTest, FailuresAreListedPerFileAndRetried) {
  MakeDataset(Files(10));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  origin_->FailPath("d/f3", Status::IoError("bad sector"), /*times=*/1);
  Warmer w(&filler, store.get(), {.threads = 2, .retry_after = 200ms, .logger = log_});
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] { return !w.Failures(42).empty(); }));
  auto f = w.Failures(42);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].path, "d/f3");
  EXPECT_NE(f[0].error.find("bad sector"), std::string::npos);
  // The fault fired once; the retry succeeds and clears the failure.
  ASSERT_TRUE(Eventually([&] { return store->usage().chunks == 10 && w.Failures(42).empty(); }));
}

TEST_F(WarmerTest, AFullStoreKeepsWhatFitsAndFetchesNothingItCannotKeep) {
  MakeDataset(Files(40));  // 40 files of 1000-1039 bytes
  auto store = OpenStore(/*capacity=*/10 * 1100);
  ChunkFiller filler(store.get(), pool_.get(), log_);
  // The clock stands still: the pass is never retried.
  FakeClock clock;
  Warmer w(&filler, store.get(), {.threads = 1, .retry_after = 10s, .logger = log_, .clock = &clock});
  w.SetTargets({{view_, AllChunks()}});
  CountIdle(&w);
  w.Start();
  ASSERT_TRUE(IdleAfter(0)) << "the pass over the targets ends";
  EXPECT_EQ(w.Failures(42).size(), 40 - store->usage().chunks);
  const uint64_t stored = store->usage().chunks;
  EXPECT_GE(stored, 9u) << "the store is filled with what fits";
  EXPECT_LE(store->usage().used_bytes, 10u * 1100);
  EXPECT_EQ(origin_->TotalReadCount(), stored) << "nothing is read from the origin that cannot be kept";
  EXPECT_NE(w.Failures(42)[0].error.find("NoSpace"), std::string::npos);
}

// A file's chunks fail and succeed separately: a later chunk of the same file
// that fits must not erase the failure of one that did not.
TEST_F(WarmerTest, AFailedChunkStaysListedWhenItsSiblingsSucceed) {
  MakeDataset({{"big", std::string(3 * kChunk, 'b')}});
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  origin_->FailPath("big", Status::IoError("bad sector"), /*times=*/1);  // the first read only
  FakeClock clock;
  Warmer w(&filler, store.get(), {.threads = 1, .retry_after = 10s, .logger = log_, .clock = &clock});
  w.SetTargets({{view_, AllChunks()}});
  CountIdle(&w);
  w.Start();
  ASSERT_TRUE(IdleAfter(0)) << "the pass over the targets ends";
  EXPECT_EQ(store->usage().chunks, 2u);
  auto f = w.Failures(42);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].path, "big");
  EXPECT_NE(f[0].error.find("bad sector"), std::string::npos);
}

TEST_F(WarmerTest, AnUnavailableOriginIsBackedOffAndTheWarmUpResumesByItself) {
  MakeDataset(Files(200));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  origin_->FailAll(Status::Unavailable("nfs server not responding"));
  // retry_after is far away: only the backoff may bring the warm-up back.
  FakeClock clock;
  Warmer w(&filler, store.get(),
           {.threads = 4, .retry_after = 600s, .first_backoff = 50ms, .max_backoff = 200ms, .logger = log_,
            .clock = &clock});
  w.SetTargets({{view_, AllChunks()}});
  CountIdle(&w);
  w.Start();
  auto opens = [&] {
    uint64_t n = 0;
    for (int i = 0; i < 200; ++i) n += origin_->OpenCount("d/f" + std::to_string(i));
    return n;
  };
  // Backed off after the first failure: each worker fails at most the job it
  // had taken, then all wait; not a pass over all 200 chunks.
  ASSERT_TRUE(IdleAfter(0));
  EXPECT_GE(opens(), 1u);
  EXPECT_LE(opens(), 4u);
  auto f = w.Failures(42);
  ASSERT_FALSE(f.empty());
  EXPECT_NE(f[0].error.find("not responding"), std::string::npos) << f[0].error;
  EXPECT_NE(f[0].error.find("retrying in"), std::string::npos) << f[0].error;
  // The end of each interval (they double from 50 ms up to max_backoff)
  // brings one more round of at most one attempt per worker.
  uint64_t before = opens();
  for (auto interval : {50ms, 100ms, 200ms, 200ms}) {
    const int seen = idle_.load();
    clock.Advance(interval);
    ASSERT_TRUE(IdleAfter(seen));
    EXPECT_GT(opens(), before);
    EXPECT_LE(opens(), before + 4);
    before = opens();
  }
  EXPECT_EQ(store->usage().chunks, 0u);
  // The server is back: everything arrives at the end of the interval, the
  // failed chunks included, and the failures are gone.
  origin_->ClearFaults();
  clock.Advance(200ms);
  ASSERT_TRUE(Eventually([&] { return store->usage().chunks == 200 && w.Failures(42).empty(); }, 5s));
}

TEST_F(WarmerTest, TellsTheNodeWhenTheLastChunkIsStored) {
  MakeDataset(Files(60));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  origin_->SetDelay(2ms);
  Warmer w(&filler, store.get(), {.threads = 4, .logger = log_});
  Mutex mu;
  std::vector<uint64_t> seen;  // chunks stored at each call
  w.SetOnIdle([&] {
    MutexLock lock(&mu);
    seen.push_back(store->usage().chunks);
  });
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] {
    MutexLock lock(&mu);
    return !seen.empty() && seen.back() == 60;
  }));
  MutexLock lock(&mu);
  // Called with nothing to do (before the targets came) or when all was
  // stored; never while the last chunks were still on their way.
  for (uint64_t n : seen) EXPECT_TRUE(n == 0 || n == 60) << n;
}

TEST_F(WarmerTest, StopWhileWorkingReturnsPromptly) {
  MakeDataset(Files(100));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  origin_->SetDelay(20ms);
  Warmer w(&filler, store.get(), {.threads = 4, .logger = log_});
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] { return w.fetched_chunks() > 0; })) << "the workers are busy";
  auto start = std::chrono::steady_clock::now();
  w.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

}  // namespace
}  // namespace hoard
