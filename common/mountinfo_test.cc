#include "common/mountinfo.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

TEST(MountInfoTest, UnescapesWhatMountinfoEscapes) {
  EXPECT_EQ(UnescapeMountPath("/tmp/with\\040space/tab\\011/nl\\012/bs\\134"), "/tmp/with space/tab\t/nl\n/bs\\");
  EXPECT_EQ(UnescapeMountPath("/plain/path"), "/plain/path");
  // Not an escape: too short, or not octal.
  EXPECT_EQ(UnescapeMountPath("/a\\04"), "/a\\04");
  EXPECT_EQ(UnescapeMountPath("/a\\089"), "/a\\089");
}

TEST(MountInfoTest, FindsTheRootMountsDevice) {
  Result<std::string> dev = MountDevice("/");
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  const size_t colon = dev->find(':');
  ASSERT_NE(colon, std::string::npos) << *dev;
  EXPECT_GT(colon, 0u);
  EXPECT_LT(colon + 1, dev->size());
}

TEST(MountInfoTest, APlainDirectoryIsNotAMount) {
  EXPECT_EQ(MountDevice("/definitely/not/a/mount/point").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace hoard
