#include "proto/ordinals.h"

#include <random>

#include <gtest/gtest.h>

namespace hoard::proto {
namespace {

std::vector<uint64_t> Decode(const std::vector<char>& bytes, uint64_t limit, uint64_t count, Status* s) {
  std::vector<uint64_t> out;
  *s = DecodeOrdinals(bytes, limit, count, [&](uint64_t o) { out.push_back(o); });
  return out;
}

TEST(OrdinalsTest, RoundTripsSparseDenseAndHugeOrdinals) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> want = {0, 1, 2, 3, 1000, 1001, 1u << 20, (1ull << 40) + 5};
  uint64_t o = want.back();
  for (int i = 0; i < 10000; ++i) want.push_back(o += 1 + rng() % 3000);
  want.push_back(UINT64_MAX - 1);
  OrdinalEncoder enc;
  for (uint64_t v : want) enc.Add(v);
  EXPECT_EQ(enc.count(), want.size());
  std::vector<char> bytes = enc.Finish();
  Status s;
  EXPECT_EQ(Decode(bytes, UINT64_MAX, want.size(), &s), want);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(OrdinalsTest, ARunOfConsecutiveChunksCostsOneByteEach) {
  OrdinalEncoder enc;
  for (uint64_t v = 0; v < 1000; ++v) enc.Add(v);
  EXPECT_EQ(enc.Finish().size(), 1000u);
  OrdinalEncoder empty;
  Status s;
  EXPECT_TRUE(Decode(empty.Finish(), 10, 0, &s).empty());
  EXPECT_TRUE(s.ok());
}

TEST(OrdinalsTest, UntrustedBytesAreCheckedNotBelieved) {
  OrdinalEncoder enc;
  for (uint64_t v : {3, 9, 12}) enc.Add(v);
  const std::vector<char> good = enc.Finish();
  Status s;
  Decode(good, 13, 3, &s);
  EXPECT_TRUE(s.ok());
  // Past the dataset's end.
  Decode(good, 12, 3, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  // A count that disagrees either way.
  Decode(good, 100, 2, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  Decode(good, 100, 4, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  // Cut inside a number; an endless number; a gap that wraps past 2^64.
  Decode({char(0x85)}, 100, 1, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  Decode(std::vector<char>(11, char(0xff)), UINT64_MAX, 1, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  std::vector<char> wrap = {char(0xfe), char(0xff), char(0xff), char(0xff), char(0xff), char(0xff), char(0xff),
                            char(0xff), char(0xff), char(0x01)};  // UINT64_MAX - 1
  for (char c : {char(0x01)}) wrap.push_back(c);                 // + 1 + 1 wraps
  Decode(wrap, UINT64_MAX, 2, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoard::proto
