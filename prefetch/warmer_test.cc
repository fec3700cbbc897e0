#include "prefetch/warmer.h"

#include <atomic>
#include <mutex>
#include <thread>

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
  Warmer w(&filler, store.get(), {.threads = 1, .retry_after = 10s, .logger = log_});
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] { return w.Failures(42).size() == 40 - store->usage().chunks; }));
  std::this_thread::sleep_for(200ms);
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
  Warmer w(&filler, store.get(), {.threads = 1, .retry_after = 10s, .logger = log_});
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] { return store->usage().chunks == 2; }));
  std::this_thread::sleep_for(100ms);
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
  Warmer w(&filler, store.get(),
           {.threads = 4, .retry_after = 600s, .first_backoff = 50ms, .max_backoff = 200ms, .logger = log_});
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] { return !w.Failures(42).empty(); }));
  std::this_thread::sleep_for(1s);
  // Backed off: a few attempts per interval, not a pass over all 200 chunks
  // (nor a tight loop).
  uint64_t opens = 0;
  for (int i = 0; i < 200; ++i) opens += origin_->OpenCount("d/f" + std::to_string(i));
  EXPECT_LT(opens, 80u);
  auto f = w.Failures(42);
  ASSERT_FALSE(f.empty());
  EXPECT_NE(f[0].error.find("not responding"), std::string::npos) << f[0].error;
  EXPECT_NE(f[0].error.find("retrying in"), std::string::npos) << f[0].error;
  EXPECT_EQ(store->usage().chunks, 0u);
  // The server is back: everything arrives, the failed chunks included,
  // within a backoff interval or two, and the failures are gone.
  origin_->ClearFaults();
  ASSERT_TRUE(Eventually([&] { return store->usage().chunks == 200 && w.Failures(42).empty(); }, 5s));
}

TEST_F(WarmerTest, TellsTheNodeWhenTheLastChunkIsStored) {
  MakeDataset(Files(60));
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  origin_->SetDelay(2ms);
  Warmer w(&filler, store.get(), {.threads = 4, .logger = log_});
  std::mutex mu;
  std::vector<uint64_t> seen;  // chunks stored at each call
  w.SetOnIdle([&] {
    std::lock_guard lock(mu);
    seen.push_back(store->usage().chunks);
  });
  w.Start();
  w.SetTargets({{view_, AllChunks()}});
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard lock(mu);
    return !seen.empty() && seen.back() == 60;
  }));
  std::lock_guard lock(mu);
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
  std::this_thread::sleep_for(50ms);
  auto start = std::chrono::steady_clock::now();
  w.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

}  // namespace
}  // namespace hoard
