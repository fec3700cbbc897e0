#include "consensus/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace hoard {
namespace {

TEST(Base64Test, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xfb\xff\xbf", 3)), "+/+/");
}

TEST(Base64Test, RoundTripsEveryByteAndLength) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (size_t n = 0; n <= bytes.size(); n += 1) {
    const std::string in = bytes.substr(0, n);
    auto out = Base64Decode(Base64Encode(in));
    ASSERT_TRUE(out.ok()) << n;
    EXPECT_EQ(*out, in) << n;
  }
}

TEST(Base64Test, RefusesWhatIsNotBase64) {
  for (const char* bad : {"Zg=", "Zm9v!A==", "Z===", "=Zm9", "Zm=v", "Zg==Zg=="}) {
    EXPECT_EQ(Base64Decode(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace hoard
