#include "striping/chunk_key.h"

#include <cstdint>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

namespace hoard {
namespace {

TEST(ChunkKeyTest, NameIsFileHexDashIndexHex) {
  ChunkKey key{FileKey{0x0123456789abcdefULL, 0xfedcba9876543210ULL}, 0xab};
  EXPECT_EQ(key.Name(), "fedcba98765432100123456789abcdef-000000ab");
  key.index = 0xffffffffu;
  EXPECT_EQ(key.Name(), "fedcba98765432100123456789abcdef-ffffffff");
  EXPECT_EQ(ChunkKey{}.Name(), "00000000000000000000000000000000-00000000");
}

TEST(ChunkKeyTest, NamesOfDistinctKeysDiffer) {
  FileKey f = MakeFileKey(1, "a", 10, 20);
  std::set<std::string> names;
  for (uint32_t i = 0; i < 1000; ++i) names.insert(ChunkKey{f, i}.Name());
  EXPECT_EQ(names.size(), 1000u);
}

TEST(ChunkKeyTest, MakeFileKeyIsStable) {
  // The key names chunk files on every node's disk, so its encoding must never
  // change silently: these values pin it (XXH3-128 is stable since xxHash 0.8).
  // They were checked against the layout encoded by hand (Python struct.pack
  // '<Q' uid, '<Q' len, path, '<Q' size, '<q' mtime) hashed with XXH3_128bits.
  EXPECT_EQ(MakeFileKey(42, "imagenet/train/n01440764/a.JPEG", 110735, 1700000000123456789).Hex(),
            "dcb03e11fc01a9f44e82ba557a935c61");
  EXPECT_EQ(MakeFileKey(0, "", 0, 0).Hex(), "9a026d96b3c0f0fca057271c9071c99d");
}

TEST(ChunkKeyTest, MakeFileKeyChangesWithEveryInput) {
  const FileKey base = MakeFileKey(7, "train/shard-00001.tar", 1 << 30, 1'700'000'000'000'000'000);
  EXPECT_EQ(base, MakeFileKey(7, "train/shard-00001.tar", 1 << 30, 1'700'000'000'000'000'000));
  EXPECT_NE(base, MakeFileKey(8, "train/shard-00001.tar", 1 << 30, 1'700'000'000'000'000'000));
  EXPECT_NE(base, MakeFileKey(7, "train/shard-00002.tar", 1 << 30, 1'700'000'000'000'000'000));
  EXPECT_NE(base,
            MakeFileKey(7, "train/shard-00001.tar", (1 << 30) + 1, 1'700'000'000'000'000'000));
  EXPECT_NE(base, MakeFileKey(7, "train/shard-00001.tar", 1 << 30, 1'700'000'000'000'000'001));
  EXPECT_NE(MakeFileKey(1, "f", 0, 5), MakeFileKey(1, "f", 0, -5));
  EXPECT_NE(MakeFileKey(1, "f", 0, 0), MakeFileKey(1, "f", 0, -1));
}

TEST(ChunkKeyTest, LongPathsAreEncodedLikeShortOnes) {
  // Paths past the stack buffer take another code path; the key must still
  // cover every byte and follow the same layout.
  for (size_t len : {479u, 480u, 481u, 4096u}) {
    std::string path(len, 'p');
    const FileKey key = MakeFileKey(3, path, 9, 9);
    EXPECT_EQ(key, MakeFileKey(3, path, 9, 9));
    path.back() = 'q';
    EXPECT_NE(key, MakeFileKey(3, path, 9, 9)) << len;
    path.front() = 'q';
    EXPECT_NE(key, MakeFileKey(3, path, 9, 9)) << len;
  }
  // A golden value on the heap path too (checked the same way as above).
  EXPECT_EQ(MakeFileKey(42, std::string(1000, 'x'), 1, -1).Hex(),
            "c2fd0331da412170c191ab60dd6faf65");
}

TEST(ChunkKeyTest, MakeFileKeyHasNoFieldBoundaryCollisions) {
  // Inputs whose naive concatenations collide: a path that is a prefix of
  // another, paths ending or containing NUL, and integers whose byte images
  // could be mistaken for path bytes. Every tuple must get its own key.
  const std::vector<std::string> paths = {
      "", "a", "ab", "abc", "bc", "c", std::string("a\0", 2), std::string("\0a", 2),
      std::string("a\0b", 3), std::string(1, '\x01'), std::string(8, '\0'), std::string(9, '\0'),
      "a/b", "a/b/", std::string("ab\x01\0\0\0\0\0\0\0", 10)};
  const std::vector<uint64_t> uids = {0, 1, 2, 0x100, 0x6261};  // 0x6261 is "ab" little-endian
  const std::vector<uint64_t> sizes = {0, 1, 2, 0x63, 0x100, ~uint64_t{0}};
  const std::vector<int64_t> mtimes = {0, 1, -1, 0x63, INT64_MIN, INT64_MAX};
  std::set<FileKey> keys;
  size_t tuples = 0;
  for (uint64_t uid : uids) {
    for (const std::string& path : paths) {
      for (uint64_t size : sizes) {
        for (int64_t mtime : mtimes) {
          keys.insert(MakeFileKey(uid, path, size, mtime));
          ++tuples;
        }
      }
    }
  }
  EXPECT_EQ(keys.size(), tuples);
}

TEST(ChunkKeyTest, PlacementHashSpreadsIndicesAndFiles) {
  const FileKey a = MakeFileKey(1, "a", 100, 0);
  const FileKey b = MakeFileKey(1, "b", 100, 0);
  std::unordered_set<uint64_t> hashes;
  for (uint32_t i = 0; i < 10000; ++i) {
    hashes.insert(ChunkKey{a, i}.PlacementHash());
    hashes.insert(ChunkKey{b, i}.PlacementHash());
  }
  EXPECT_EQ(hashes.size(), 20000u);
  std::unordered_set<ChunkKey, ChunkKeyHash> set = {ChunkKey{a, 0}, ChunkKey{a, 1}, ChunkKey{a, 0}};
  EXPECT_EQ(set.size(), 2u);
}

TEST(ChunkKeyTest, ChunksOfOneFileOrderByIndex) {
  const FileKey f = MakeFileKey(1, "a", 100, 0);
  EXPECT_LT((ChunkKey{f, 1}), (ChunkKey{f, 2}));
  EXPECT_NE((ChunkKey{f, 1}), (ChunkKey{MakeFileKey(1, "b", 100, 0), 1}));
}

}  // namespace
}  // namespace hoard
