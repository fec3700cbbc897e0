#include "prefetch/warmer.h"

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
