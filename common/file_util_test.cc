#include "common/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

namespace hoard {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hoard-fileutil-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(dir_); }
  std::string dir_;
};

TEST_F(FileUtilTest, AtomicWriteReplacesContent) {
  std::string p = JoinPath(dir_, "state");
  ASSERT_TRUE(WriteFileAtomic(p, "one").ok());
  ASSERT_TRUE(WriteFileAtomic(p, "two, longer").ok());
  Result<std::string> r = ReadFile(p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "two, longer");
  EXPECT_NE(::access((p + ".tmp").c_str(), F_OK), 0);
}

TEST_F(FileUtilTest, ReadMissingFileIsNotFound) {
  EXPECT_EQ(ReadFile(JoinPath(dir_, "nope")).status().code(), Code::kNotFound);
}

TEST_F(FileUtilTest, PreadPastEndIsIoError) {
  std::string p = JoinPath(dir_, "short");
  ASSERT_TRUE(WriteFileAtomic(p, "abc").ok());
  UniqueFd fd(::open(p.c_str(), O_RDONLY));
  char buf[8];
  EXPECT_TRUE(PreadAll(fd.get(), buf, 3, 0).ok());
  EXPECT_EQ(PreadAll(fd.get(), buf, 8, 0).code(), Code::kIoError);
}

TEST_F(FileUtilTest, MakeDirsAndRemoveTree) {
  std::string deep = JoinPath(dir_, "a/b/c");
  ASSERT_TRUE(MakeDirs(deep).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(deep, "f"), "x").ok());
  ASSERT_TRUE(RemoveTree(JoinPath(dir_, "a")).ok());
  EXPECT_NE(::access(deep.c_str(), F_OK), 0);
  EXPECT_TRUE(RemoveTree(JoinPath(dir_, "a")).ok());
}

TEST(PathTest, DirNameAndJoin) {
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(JoinPath("a/", "/b"), "a/b");
}

}  // namespace
}  // namespace hoard
