#include "striping/chunking.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(ChunkingTest, ValidChunkSizeAcceptsPowersOfTwoInRange) {
  EXPECT_TRUE(ValidChunkSize(kMinChunkSize));
  EXPECT_TRUE(ValidChunkSize(kDefaultChunkSize));
  EXPECT_TRUE(ValidChunkSize(kMaxChunkSize));
  for (uint64_t s = kMinChunkSize; s <= kMaxChunkSize; s <<= 1) EXPECT_TRUE(ValidChunkSize(s)) << s;
}

TEST(ChunkingTest, ValidChunkSizeRejectsOutOfRangeAndNonPowers) {
  EXPECT_FALSE(ValidChunkSize(0));  // 0 & (0 - 1) == 0: only the range check stops it
  EXPECT_FALSE(ValidChunkSize(1));
  EXPECT_FALSE(ValidChunkSize(kMinChunkSize / 2));
  EXPECT_FALSE(ValidChunkSize(kMinChunkSize - 1));
  EXPECT_FALSE(ValidChunkSize(kMinChunkSize + 1));
  EXPECT_FALSE(ValidChunkSize(3 * kMiB));
  EXPECT_FALSE(ValidChunkSize(kMaxChunkSize - 1));
  EXPECT_FALSE(ValidChunkSize(kMaxChunkSize * 2));
  EXPECT_FALSE(ValidChunkSize(uint64_t{1} << 63));
}

TEST(ChunkingTest, EmptyFileHasNoChunks) { EXPECT_EQ(ChunkCount(0, kDefaultChunkSize), 0u); }

TEST(ChunkingTest, OneByteFileIsOneShortChunk) {
  ASSERT_EQ(ChunkCount(1, kDefaultChunkSize), 1u);
  EXPECT_EQ(ChunkLength(1, kDefaultChunkSize, 0), 1u);
}

TEST(ChunkingTest, ExactMultipleHasNoShortTail) {
  const uint64_t cs = kDefaultChunkSize;
  EXPECT_EQ(ChunkCount(cs, cs), 1u);
  EXPECT_EQ(ChunkLength(cs, cs, 0), cs);
  ASSERT_EQ(ChunkCount(3 * cs, cs), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(ChunkLength(3 * cs, cs, i), cs);
}

TEST(ChunkingTest, OneByteOverAMultipleAddsAOneByteChunk) {
  const uint64_t cs = kMinChunkSize;
  ASSERT_EQ(ChunkCount(2 * cs + 1, cs), 3u);
  EXPECT_EQ(ChunkLength(2 * cs + 1, cs, 1), cs);
  EXPECT_EQ(ChunkLength(2 * cs + 1, cs, 2), 1u);
  EXPECT_EQ(ChunkCount(cs - 1, cs), 1u);
  EXPECT_EQ(ChunkLength(cs - 1, cs, 0), cs - 1);
}

TEST(ChunkingTest, LengthsSumToFileSize) {
  for (uint64_t cs : {kMinChunkSize, kDefaultChunkSize, kMaxChunkSize}) {
    for (uint64_t size : {uint64_t{1}, cs - 1, cs, cs + 1, 10 * cs + 12345, 1000 * kMiB + 7}) {
      uint64_t n = ChunkCount(size, cs);
      uint64_t sum = 0;
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = ChunkLength(size, cs, i);
        EXPECT_GT(len, 0u);
        EXPECT_LE(len, cs);
        if (i + 1 < n) {
          EXPECT_EQ(len, cs) << "only the last chunk may be short";
        }
        sum += len;
      }
      EXPECT_EQ(sum, size) << "size " << size << " chunk " << cs;
    }
  }
}

TEST(ChunkingTest, LargeFileNeedsNoOverflowHeadroomBelowTheTopChunk) {
  // 1 TiB file at the smallest chunk size: 2^24 chunks, index * chunk_size stays exact.
  const uint64_t size = uint64_t{1} << 40, cs = kMinChunkSize;
  ASSERT_EQ(ChunkCount(size, cs), uint64_t{1} << 24);
  EXPECT_EQ(ChunkLength(size, cs, (uint64_t{1} << 24) - 1), cs);
  EXPECT_EQ(ChunkCount(size + 1, cs), (uint64_t{1} << 24) + 1);
}

TEST(ChunkingTest, ChunkIndexOfMapsBoundaries) {
  const uint64_t cs = kDefaultChunkSize;
  EXPECT_EQ(ChunkIndexOf(0, cs), 0u);
  EXPECT_EQ(ChunkIndexOf(cs - 1, cs), 0u);
  EXPECT_EQ(ChunkIndexOf(cs, cs), 1u);
  EXPECT_EQ(ChunkIndexOf(5 * cs + 17, cs), 5u);
  // Every byte of a file falls in a chunk that exists, the last byte in the last chunk.
  const uint64_t size = 7 * cs + 3;
  EXPECT_EQ(ChunkIndexOf(size - 1, cs), ChunkCount(size, cs) - 1);
}

}  // namespace
}  // namespace hoard
