#include "prefetch/chunk_filler.h"

#include <set>
#include <thread>

#include "prefetch/prefetch_test_util.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

class ChunkFillerTest : public PrefetchTest {};

TEST_F(ChunkFillerTest, ReadsTheRightRangeAndCachesWhenAsked) {
  std::string big(3 * kChunk + 10, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 7);
  MakeDataset({{"a/big", big}});
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  auto r = filler.Fill(*view_, Ref("a/big", 3), /*cache=*/false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r->bytes, big.substr(3 * kChunk));
  EXPECT_FALSE(store->Contains(view_->manifest.chunk_key(Ref("a/big", 3).entry, 3)));
  r = filler.Fill(*view_, Ref("a/big", 1), /*cache=*/true);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->cache_status.ok());
  std::string back(kChunk, '\0');
  ASSERT_TRUE(store->Read(view_->manifest.chunk_key(Ref("a/big", 1).entry, 1), 0, kChunk, back.data()).ok());
  EXPECT_EQ(back, big.substr(kChunk, kChunk));
  EXPECT_EQ(filler.origin_bytes(), 10 + kChunk);
}

TEST_F(ChunkFillerTest, ConcurrentCallersShareOneOriginRead) {
  MakeDataset({{"f", std::string(kChunk, 'x')}});
  ChunkFiller filler(nullptr, pool_.get(), log_);
  origin_->SetDelay(50ms);
  std::vector<std::thread> t;
  std::set<const std::string*> buffers;
  std::mutex mu;
  for (int i = 0; i < 10; ++i) {
    t.emplace_back([&] {
      auto r = filler.Fill(*view_, Ref("f", 0), false);
      ASSERT_TRUE(r.ok());
      std::lock_guard lock(mu);
      buffers.insert(r->bytes.get());
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(origin_->ReadCount("f"), 1u);
  EXPECT_EQ(buffers.size(), 1u) << "every caller got the same bytes";
}

TEST_F(ChunkFillerTest, FileChangedAtTheOriginIsStale) {
  MakeDataset({{"f", std::string(100, 'x')}});
  ChunkFiller filler(nullptr, pool_.get(), log_);
  ASSERT_TRUE(origin_->AddFile("f", std::string(101, 'y')).ok());  // size changed
  EXPECT_EQ(filler.Fill(*view_, Ref("f", 0), false).status().code(), Code::kStale);
  MemAttributes later;
  later.mtime_ns += 5;
  ASSERT_TRUE(origin_->AddFile("f", std::string(100, 'y'), later).ok());  // same size, new mtime
  EXPECT_EQ(filler.Fill(*view_, Ref("f", 0), false).status().code(), Code::kStale);
}

TEST_F(ChunkFillerTest, OriginErrorsPassThroughAndAreNotCached) {
  MakeDataset({{"f", std::string(100, 'x')}});
  ChunkFiller filler(nullptr, pool_.get(), log_);
  origin_->FailPath("f", Status::Unavailable("server gone"), /*times=*/1);
  auto r = filler.Fill(*view_, Ref("f", 0), false);
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("ds/f"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(filler.Fill(*view_, Ref("f", 0), false).ok()) << "a failure is not remembered";
}

TEST_F(ChunkFillerTest, FullStoreStillReturnsTheBytes) {
  MakeDataset({{"f", std::string(kChunk, 'x')}});
  auto store = OpenStore(/*capacity=*/1000);
  ChunkFiller filler(store.get(), pool_.get(), log_);
  auto r = filler.Fill(*view_, Ref("f", 0), true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bytes->size(), kChunk);
  EXPECT_EQ(r->cache_status.code(), Code::kNoSpace);
}

}  // namespace
}  // namespace hoard
