#include "fuse/read_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/testing.h"
#include "store/chunk_file.h"

namespace hoard::fuse {
namespace {

// The key of the only chunk of file "fN" of dataset 7, as a manifest makes it.
ChunkKey Key(uint64_t file) { return ChunkKey{MakeFileKey(7, "f" + std::to_string(file), 1, 1), 0}; }

std::shared_ptr<const std::string> Bytes(size_t n, uint64_t seed) {
  return std::make_shared<const std::string>(hoard::testing::PseudoRandomBytes(n, seed));
}

class ReadTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<ReadTier> Open(uint64_t capacity, uint64_t min_free = 0, size_t max_pending = 64u << 20,
                                 std::string node_usage_path = "") {
    Result<std::unique_ptr<ReadTier>> t = ReadTier::Open(ReadTier::Options{
        .dir = dir_,
        .capacity_bytes = capacity,
        .min_free_bytes = min_free,
        .node_usage_path = std::move(node_usage_path),
        .clock = &clock_,
        .max_pending_bytes = max_pending,
        .logger = logger_,
        .on_stored = [this](const ChunkKey& key) { stored_.push_back(key); }});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // The copy's bytes, read and verified the way the mount reads it; empty if absent.
  std::string ReadCopy(const ReadTier& tier, const ChunkKey& key) {
    char rel[ChunkStore::kRelativePathSize];
    ChunkStore::RelativeChunkPath(key, rel);
    UniqueFd fd(::openat(tier.chunks_dir(), rel, O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return "";
    struct stat st;
    EXPECT_EQ(::fstat(fd.get(), &st), 0);
    char scratch[4096];
    Result<ChunkMeta> t = ReadAndVerifyChunkFile(fd.get(), uint64_t(st.st_size), scratch, sizeof scratch);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return "";
    std::string out(t->length, '\0');
    EXPECT_EQ(::pread(fd.get(), out.data(), out.size(), 0), ssize_t(out.size()));
    return out;
  }

  hoard::testing::TempDir tmp_{"hoard-read-tier"};
  std::string dir_ = JoinPath(tmp_.path(), "tier");
  std::shared_ptr<spdlog::logger> logger_ =
      std::make_shared<spdlog::logger>("read-tier-test", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  std::vector<ChunkKey> stored_;  // written by the tier's writer; read after Flush
  FakeClock clock_;
};

TEST_F(ReadTierTest, ACopyIsTheChunksBytesInTheStoreFormat) {
  auto tier = Open(1 << 20);
  auto bytes = Bytes(100'000, 1);
  tier->Offer(Key(1), 7, bytes);
  tier->Offer(Key(1), 7, bytes);  // a second offer of the same chunk writes nothing
  tier->Flush();
  EXPECT_EQ(ReadCopy(*tier, Key(1)), *bytes);
  EXPECT_EQ(stored_, std::vector<ChunkKey>{Key(1)});
  EXPECT_EQ(tier->counters().stored_chunks.load(), 1u);
  EXPECT_EQ(tier->counters().stored_bytes.load(), 100'000u);
  EXPECT_EQ(tier->counters().used_bytes.load(), 100'000u);
  EXPECT_EQ(ReadCopy(*tier, Key(2)), "");
}

TEST_F(ReadTierTest, TheOldestCopiesGoWhenTheTierIsFull) {
  // Room for three 10,000-byte copies (with their trailers), not four.
  auto tier = Open(3 * (10'000 + kChunkMetaSize) + 100);
  for (uint64_t i = 1; i <= 5; ++i) {
    tier->Offer(Key(i), 7, Bytes(10'000, i));
    tier->Flush();
  }
  EXPECT_EQ(ReadCopy(*tier, Key(1)), "");
  EXPECT_EQ(ReadCopy(*tier, Key(2)), "");
  for (uint64_t i = 3; i <= 5; ++i) EXPECT_EQ(ReadCopy(*tier, Key(i)), *Bytes(10'000, i)) << i;
  EXPECT_EQ(tier->counters().evicted_bytes.load(), 20'000u);
  EXPECT_EQ(tier->counters().chunks.load(), 3u);
}

TEST_F(ReadTierTest, CopiesSurviveARestartAndAreEvictedOldestFirstAfterIt) {
  const uint64_t cap = 3 * (10'000 + kChunkMetaSize) + 100;
  {
    auto tier = Open(cap);
    tier->Offer(Key(1), 7, Bytes(10'000, 1));
    tier->Offer(Key(2), 7, Bytes(10'000, 2));
    tier->Flush();
  }
  auto tier = Open(cap);
  EXPECT_EQ(ReadCopy(*tier, Key(1)), *Bytes(10'000, 1));
  tier->Offer(Key(3), 7, Bytes(10'000, 3));
  tier->Offer(Key(4), 7, Bytes(10'000, 4));
  tier->Flush();
  EXPECT_EQ(tier->counters().chunks.load(), 3u) << "the copies found at start count against the capacity";
  EXPECT_EQ(ReadCopy(*tier, Key(4)), *Bytes(10'000, 4));
  EXPECT_EQ(ReadCopy(*tier, Key(3)), *Bytes(10'000, 3));
}

TEST_F(ReadTierTest, RemovingADatasetDeletesOnlyItsCopies) {
  auto tier = Open(1 << 20);
  tier->Offer(Key(1), 7, Bytes(1000, 1));
  tier->Offer(Key(2), 8, Bytes(1000, 2));
  tier->RemoveDataset(7);
  tier->Flush();
  EXPECT_EQ(ReadCopy(*tier, Key(1)), "");
  EXPECT_EQ(ReadCopy(*tier, Key(2)), *Bytes(1000, 2));
  EXPECT_EQ(tier->counters().chunks.load(), 1u);
}

TEST_F(ReadTierTest, ALowDiskKeepsNothingAndFailsNothing) {
  // A floor of free space no disk has: every copy is dropped, none written.
  auto tier = Open(1 << 20, /*min_free=*/~0ull >> 1);
  tier->Offer(Key(1), 7, Bytes(1000, 1));
  tier->Flush();
  EXPECT_EQ(ReadCopy(*tier, Key(1)), "");
  EXPECT_EQ(tier->counters().dropped_chunks.load(), 1u);
  EXPECT_TRUE(stored_.empty());
}

TEST_F(ReadTierTest, ACopyLargerThanTheQueueIsDroppedNotWaitedFor) {
  auto tier = Open(1 << 20, 0, /*max_pending=*/1000);
  tier->Offer(Key(1), 7, Bytes(5000, 1));
  tier->Flush();
  EXPECT_EQ(ReadCopy(*tier, Key(1)), "");
  EXPECT_EQ(tier->counters().dropped_chunks.load(), 1u);
}

TEST_F(ReadTierTest, ACopyLargerThanTheTierIsDropped) {
  auto tier = Open(/*capacity=*/1000);
  tier->Offer(Key(1), 7, Bytes(500, 1));
  tier->Offer(Key(2), 7, Bytes(5000, 2));
  tier->Flush();
  EXPECT_EQ(ReadCopy(*tier, Key(2)), "");
  EXPECT_EQ(ReadCopy(*tier, Key(1)), *Bytes(500, 1)) << "nothing is evicted for a copy that can never fit";
  EXPECT_EQ(tier->counters().dropped_chunks.load(), 1u);
}

// The tier shares the node's --capacity (store/disk_usage.h): it keeps to
// what the node's datasets and checkpoints leave, giving back its oldest
// copies when they grow, and says what it holds (and may hold) before it
// writes, so the node agent counts it.
TEST_F(ReadTierTest, TrimsItselfToWhatTheNodesCapacityLeavesIt) {
  const std::string node_usage = NodeUsagePath(tmp_.path());
  ASSERT_TRUE(WriteNodeUsage(node_usage, {.capacity_bytes = 100'000}).ok());
  auto tier = Open(1 << 20, 0, 64u << 20, node_usage);
  const std::string usage_path = ReadTierUsagePath(dir_);
  // Its reservation grows by a step (here: a copy) a second, so that the
  // agent sees it before the tier takes more.
  tier->Offer(Key(1), 7, Bytes(10'000, 1));
  tier->Offer(Key(2), 7, Bytes(10'000, 2));
  tier->Flush();
  EXPECT_EQ(tier->counters().chunks.load(), 1u);
  EXPECT_EQ(tier->counters().dropped_chunks.load(), 1u);
  for (uint64_t i = 2; i <= 5; ++i) {
    clock_.Advance(std::chrono::seconds(1));
    tier->Offer(Key(i), 7, Bytes(10'000, i));
    tier->Flush();
    Result<ReadTierUsage> published = ReadReadTierUsage(usage_path);
    ASSERT_TRUE(published.ok()) << published.status().ToString();
    EXPECT_GE(published->reserved_bytes, tier->counters().used_bytes.load())
        << "copy " << i << " was written past what the node agent was told";
    EXPECT_LE(published->reserved_bytes, 100'000u);
  }
  EXPECT_EQ(tier->counters().chunks.load(), 5u);

  // The node's datasets and checkpoints grew: 25,000 bytes are left.
  ASSERT_TRUE(WriteNodeUsage(node_usage, {.capacity_bytes = 100'000,
                                          .usage = {.dataset_bytes = 50'000, .checkpoint_bytes = 25'000}})
                  .ok());
  tier->Trim();
  tier->Flush();
  EXPECT_LE(tier->counters().used_bytes.load(), 25'000u);
  EXPECT_EQ(tier->counters().chunks.load(), 2u);
  EXPECT_EQ(tier->counters().allowed_bytes.load(), 25'000u);
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_EQ(ReadCopy(*tier, Key(i)), "") << "the oldest go first: " << i;
  for (uint64_t i = 4; i <= 5; ++i) EXPECT_EQ(ReadCopy(*tier, Key(i)), *Bytes(10'000, i)) << i;
  Result<ReadTierUsage> published = ReadReadTierUsage(usage_path);
  ASSERT_TRUE(published.ok());
  EXPECT_EQ(published->used_bytes, tier->counters().used_bytes.load());
  EXPECT_LE(published->reserved_bytes, 25'000u) << "room the tier may no longer take is given back";

  // A warm-up wants the rest of the capacity: the tier keeps nothing and
  // takes nothing, and the reads it would have served go on without it.
  ASSERT_TRUE(WriteNodeUsage(node_usage, {.capacity_bytes = 100'000,
                                          .usage = {.dataset_bytes = 50'000, .checkpoint_bytes = 25'000},
                                          .dataset_wanted_bytes = 75'000})
                  .ok());
  tier->Trim();
  tier->Offer(Key(6), 7, Bytes(1000, 6));
  tier->Flush();
  EXPECT_EQ(ReadCopy(*tier, Key(6)), "");
  EXPECT_EQ(tier->counters().chunks.load(), 0u);
  EXPECT_EQ(ReadReadTierUsage(usage_path)->reserved_bytes, 0u);
}

TEST_F(ReadTierTest, AutoSizeLeavesTheDiskRoom) {
  ASSERT_TRUE(MakeDirs(dir_).ok());
  uint64_t cap = 0, floor = 0;
  ReadTier::AutoSize(dir_, &cap, &floor);
  EXPECT_GT(cap, 0u);
  EXPECT_GT(floor, 0u);
  EXPECT_LE(floor, 1ull << 30);
  ReadTier::AutoSize(JoinPath(dir_, "does/not/exist"), &cap, &floor);
  EXPECT_EQ(cap, 0u) << "no disk, no tier";
}

}  // namespace
}  // namespace hoard::fuse
