// Tests of what every origin shares: names, paths and source dispatch. Each
// implementation has its own *_origin_test.cc; the NFS URL syntax is in
// nfs_url_test.cc.
#include "origin/origin.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "origin/origin_path.h"

namespace hoard {
namespace {

TEST(IsSafeNameTest, AcceptsOrdinaryNames) {
  EXPECT_TRUE(IsSafeName("a"));
  EXPECT_TRUE(IsSafeName("with space"));
  EXPECT_TRUE(IsSafeName("naïve-日本語"));
  EXPECT_TRUE(IsSafeName("..."));
  EXPECT_TRUE(IsSafeName(".hidden"));
  EXPECT_TRUE(IsSafeName(std::string(255, 'x')));
}

TEST(IsSafeNameTest, RejectsUnsafeNames) {
  EXPECT_FALSE(IsSafeName(""));
  EXPECT_FALSE(IsSafeName("."));
  EXPECT_FALSE(IsSafeName(".."));
  EXPECT_FALSE(IsSafeName("a/b"));
  EXPECT_FALSE(IsSafeName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsSafeName(std::string(256, 'x')));
}

TEST(OriginPathTest, SplitsValidPaths) {
  auto root = SplitOriginPath("");
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->empty());
  auto parts = SplitOriginPath("a/b c/d");
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[1], "b c");
}

TEST(OriginPathTest, RejectsTraversalAndMalformedPaths) {
  for (const char* bad : {"/a", "a/", "a//b", "..", "a/../b", "./a", "a/.", "../../etc/passwd"}) {
    EXPECT_EQ(SplitOriginPath(bad).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(JoinOriginPath("", "a"), "a");
  EXPECT_EQ(JoinOriginPath("a/b", "c"), "a/b/c");
}

// Both read-only origins code a failed lookup this way (the NFS and POSIX
// tests check it end to end); the writable checkpoint origins do not.
TEST(OriginPathTest, ReadErrorsAreRecodedForReading) {
  EXPECT_EQ(OriginReadError(Status::FromErrno(ENOTDIR, "stat a/b")).code(), Code::kNotFound);
  EXPECT_EQ(OriginReadError(Status::FromErrno(ELOOP, "stat a/b")).code(), Code::kNotFound);
  EXPECT_EQ(OriginReadError(Status::FromErrno(EISDIR, "open a")).code(), Code::kInvalidArgument);
  for (int err : {ENOENT, ESTALE, EAGAIN, EIO, EACCES, EEXIST}) {
    EXPECT_EQ(OriginReadError(Status::FromErrno(err, "x")).code(), CodeFromErrno(err)) << err;
  }
  Status s = OriginReadError(Status::FromErrno(ENOTDIR, "stat a/b"));
  EXPECT_EQ(s.message(), Status::FromErrno(ENOTDIR, "stat a/b").message());
}

TEST(OpenOriginTest, RejectsUnknownSources) {
  for (const char* bad : {"", "relative/dir", "http://x/y", "file:///tmp", "nfs:/x"}) {
    auto r = OpenOrigin(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_NE(OpenOrigin("relative").status().message().find("absolute"), std::string::npos);
}

TEST(OpenOriginTest, LocalDirectory) {
  char tmpl[] = "/tmp/hoard-origin-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto origin = OpenOrigin(dir);
  ASSERT_TRUE(origin.ok()) << origin.status().ToString();
  EXPECT_EQ((*origin)->source(), dir);

  EXPECT_EQ(OpenOrigin(dir + "/missing").status().code(), Code::kNotFound);
  ASSERT_TRUE(WriteFileAtomic(dir + "/file", "x").ok());
  EXPECT_EQ(OpenOrigin(dir + "/file").status().code(), Code::kInvalidArgument);
  ASSERT_TRUE(RemoveTree(dir).ok());
}

TEST(OpenOriginTest, MalformedNfsUrlIsInvalidArgument) {
  for (const char* bad : {"nfs://", "nfs://host", "nfs:///path", "nfs://host:/p", "nfs://host:0/p",
                          "nfs://host:70000/p", "nfs://host:x/p", "nfs://host/a/../b", "nfs://host/p?mountport=",
                          "nfs://host/p?nfsport=1", "nfs://[::1/p"}) {
    auto r = OpenOrigin(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace hoard
