#include "prefetch/chunk_filler.h"

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "common/mutex.h"
#include "prefetch/prefetch_test_util.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

// An origin whose files call `before_read` (with the path) before every
// ReadAt, so a test acts at an exact point of a fill (between its open and
// its read) instead of guessing the moment with a sleep.
class HookedOrigin : public ForwardingOrigin {
 public:
  using Hook = std::function<void(const std::string& path)>;
  HookedOrigin(std::shared_ptr<Origin> target, Hook before_read)
      : ForwardingOrigin(std::move(target)), before_read_(std::move(before_read)) {}

  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override {
    HOARD_ASSIGN_OR_RETURN(std::unique_ptr<OriginFile> file, ForwardingOrigin::Open(path));
    return std::unique_ptr<OriginFile>(new File(std::move(file), std::string(path), &before_read_));
  }

 private:
  class File : public OriginFile {
   public:
    File(std::unique_ptr<OriginFile> file, std::string path, const Hook* hook)
        : file_(std::move(file)), path_(std::move(path)), hook_(hook) {}
    Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) override {
      (*hook_)(path_);
      return file_->ReadAt(offset, len, buf);
    }
    const OriginEntry& attributes() const override { return file_->attributes(); }
    Result<OriginEntry> Restat() override { return file_->Restat(); }

   private:
    std::unique_ptr<OriginFile> file_;
    std::string path_;
    const Hook* hook_;
  };
  Hook before_read_;
};

class ChunkFillerTest : public PrefetchTest {
 protected:
  // A pool over the fixture's origin whose reads call `before_read` first.
  std::unique_ptr<OriginPool> HookedPool(HookedOrigin::Hook before_read) {
    auto origin = std::make_shared<HookedOrigin>(origin_, std::move(before_read));
    return std::make_unique<OriginPool>(OriginOptions{}, ForwardingOrigin::Opener("mem://p", origin));
  }
};

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
  Mutex mu;
  for (int i = 0; i < 10; ++i) {
    t.emplace_back([&] {
      auto r = filler.Fill(*view_, Ref("f", 0), false);
      ASSERT_TRUE(r.ok());
      MutexLock lock(&mu);
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

TEST_F(ChunkFillerTest, AFileRewrittenWhileItsChunkIsReadIsStaleNotMixed) {
  MakeDataset({{"f", std::string(kChunk, 'x')}});
  // The file is rewritten after the filler opened it, before it reads it.
  auto pool = HookedPool([&](const std::string&) {
    MemAttributes later;
    later.mtime_ns += 1;
    ASSERT_TRUE(origin_->RewriteFile("f", std::string(kChunk, 'y'), later).ok());
  });
  ChunkFiller filler(nullptr, pool.get(), log_);
  auto r = filler.Fill(*view_, Ref("f", 0), false);
  // The open saw the recorded size and mtime; the bytes read are the new
  // ones; the check after the read catches it.
  EXPECT_EQ(r.status().code(), Code::kStale) << r.status().ToString();
}

TEST_F(ChunkFillerTest, ARangeIsReadFromTheOriginAloneAndStoredNowhere) {
  std::string big(3 * kChunk + 10, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 13);
  MakeDataset({{"a/big", big}});
  auto store = OpenStore();
  ChunkFiller filler(store.get(), pool_.get(), log_);
  Result<ChunkFiller::Bytes> r = filler.ReadRange(*view_, Ref("a/big", 1), 100, 500);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(**r, big.substr(kChunk + 100, 500));
  // The short last chunk, to its end.
  r = filler.ReadRange(*view_, Ref("a/big", 3), 4, 6);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, big.substr(3 * kChunk + 4, 6));
  EXPECT_EQ(origin_->BytesRead("a/big"), 506u) << "just the ranges";
  EXPECT_EQ(filler.origin_bytes(), 506u);
  EXPECT_EQ(filler.range_reads(), 2u);
  EXPECT_FALSE(store->Contains(view_->manifest.chunk_key(Ref("a/big", 1).entry, 1)));
  EXPECT_EQ(filler.ReadRange(*view_, Ref("a/big", 3), 4, 7).status().code(), Code::kInvalidArgument);
}

TEST_F(ChunkFillerTest, ARangeOfAFileChangedAtTheOriginIsStale) {
  MakeDataset({{"f", std::string(kChunk, 'x')}, {"g", std::string(kChunk, 'x')}});
  ChunkFiller filler(nullptr, pool_.get(), log_);
  ASSERT_TRUE(origin_->AddFile("f", std::string(kChunk + 1, 'y')).ok());
  EXPECT_EQ(filler.ReadRange(*view_, Ref("f", 0), 0, 10).status().code(), Code::kStale);
  // Rewritten between the open and the read: caught after the read.
  auto pool = HookedPool([&](const std::string&) {
    MemAttributes later;
    later.mtime_ns += 1;
    ASSERT_TRUE(origin_->RewriteFile("g", std::string(kChunk, 'y'), later).ok());
  });
  ChunkFiller hooked(nullptr, pool.get(), log_);
  EXPECT_EQ(hooked.ReadRange(*view_, Ref("g", 0), 10, 10).status().code(), Code::kStale);
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

TEST_F(ChunkFillerTest, AReaderThatJoinsAQueuedWarmUpReadPromotesIt) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 12; ++i) files["w" + std::to_string(i)] = std::string(1000, char('a' + i));
  MakeDataset(files);
  OriginGate gate({.connections = 1});
  // The first fill to get the connection holds it until the others queued.
  testing::Gate queued;
  std::atomic<bool> first{true};
  auto pool = HookedPool([&](const std::string&) {
    if (first.exchange(false)) queued.Wait();
  });
  ChunkFiller filler(nullptr, pool.get(), log_, nullptr, &gate);
  origin_->SetDelay(40ms);  // each origin call: a fill is an open and a read
  // Twelve warm-up fills queue for the one connection.
  std::vector<std::thread> warm;
  for (int i = 0; i < 12; ++i) {
    warm.emplace_back([&, i] {
      auto r = filler.Fill(*view_, Ref("w" + std::to_string(i), 0), false, OriginGate::Priority::kWarm);
      EXPECT_TRUE(r.ok());
    });
  }
  ASSERT_TRUE(testing::Eventually([&] { return gate.warm_waits() == 11; }));
  queued.Open();
  // A reader wants the chunk of w11, whose warm-up fill is somewhere in the
  // queue: it gets it after the fill in progress, not after the whole queue
  // (12 x 80 ms).
  const auto start = std::chrono::steady_clock::now();
  auto r = filler.Fill(*view_, Ref("w11", 0), false, OriginGate::Priority::kDemand);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r->bytes, files["w11"]);
  EXPECT_LT(took, 400ms);
  for (auto& t : warm) t.join();
  EXPECT_EQ(origin_->ReadCount("w11"), 1u);  // one read, shared
}

TEST_F(ChunkFillerTest, DemandAndWarmUpCallersOfTheSameChunksNeverDeadlock) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 4; ++i) files["f" + std::to_string(i)] = std::string(100 + i, char('a' + i));
  MakeDataset(files);
  OriginGate gate({.connections = 1, .bytes_per_s = 1e6});
  ChunkFiller filler(nullptr, pool_.get(), log_, nullptr, &gate);
  origin_->SetDelay(1ms);
  std::vector<std::thread> t;
  std::atomic<int> done{0};
  for (int k = 0; k < 8; ++k) {
    t.emplace_back([&, k] {
      for (int n = 0; n < 40; ++n) {
        const auto p = (k + n) % 3 == 0 ? OriginGate::Priority::kDemand : OriginGate::Priority::kWarm;
        auto r = filler.Fill(*view_, Ref("f" + std::to_string((k * 7 + n) % 4), 0), false, p);
        EXPECT_TRUE(r.ok());
      }
      ++done;
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(done.load(), 8);
  EXPECT_EQ(gate.in_flight(), 0);
}

}  // namespace
}  // namespace hoard
