#include "common/units.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

TEST(UnitsTest, ParseBytes) {
  EXPECT_EQ(*ParseBytes("0"), 0u);
  EXPECT_EQ(*ParseBytes("512"), 512u);
  EXPECT_EQ(*ParseBytes("4k"), 4096u);
  EXPECT_EQ(*ParseBytes("4M"), 4u << 20);
  EXPECT_EQ(*ParseBytes("10GiB"), 10ull << 30);
  EXPECT_EQ(*ParseBytes("2TB"), 2ull << 40);
  EXPECT_EQ(*ParseBytes("7B"), 7u);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("G").ok());
  EXPECT_FALSE(ParseBytes("5 parsecs").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999999").ok());
  EXPECT_FALSE(ParseBytes("99999999999T").ok());
}

TEST(UnitsTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(300.0 * (1 << 20)), "300.0 MiB");
}

}  // namespace
}  // namespace hoard

namespace hoard {
namespace {

TEST(UnitsTest, ParseDurationSeconds) {
  EXPECT_EQ(*ParseDurationSeconds("0"), 0u);
  EXPECT_EQ(*ParseDurationSeconds("45"), 45u);
  EXPECT_EQ(*ParseDurationSeconds("45s"), 45u);
  EXPECT_EQ(*ParseDurationSeconds("90m"), 5400u);
  EXPECT_EQ(*ParseDurationSeconds("12h"), 43200u);
  EXPECT_EQ(*ParseDurationSeconds("7d"), 604800u);
  EXPECT_EQ(*ParseDurationSeconds("2w"), 1209600u);
  for (const char* bad : {"", "d", "7x", "7 d", "-1", "7dd", "99999999999999999999"}) {
    EXPECT_EQ(ParseDurationSeconds(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace hoard
