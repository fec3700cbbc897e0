#include "common/hash.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace hoard {
namespace {

TEST(HashTest, StreamingMatchesOneShot) {
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  StreamingChecksum s;
  for (size_t off = 0; off < data.size(); off += 4096 + 17) {
    s.Update(data.data() + off, std::min<size_t>(4096 + 17, data.size() - off));
  }
  EXPECT_EQ(s.Digest(), Checksum64(data.data(), data.size()));
}

TEST(HashTest, ChecksumDetectsOneFlippedBit) {
  std::string data(4096, 'x');
  uint64_t before = Checksum64(data.data(), data.size());
  data[1234] ^= 1;
  EXPECT_NE(before, Checksum64(data.data(), data.size()));
}

TEST(HashTest, Hash128HexIs32Digits) {
  Hash128Value h = Hash128("imagenet/train/n01440764/a.JPEG");
  EXPECT_EQ(h.Hex().size(), 32u);
  EXPECT_NE(h, Hash128("imagenet/train/n01440764/b.JPEG"));
}

TEST(HashTest, Mix64SpreadsNeighbours) {
  std::set<uint64_t> top_bytes;
  for (uint64_t i = 0; i < 1000; ++i) top_bytes.insert(Mix64(i, 42) >> 56);
  EXPECT_GT(top_bytes.size(), 200u);  // 1000 draws over 256 buckets
}

}  // namespace
}  // namespace hoard
