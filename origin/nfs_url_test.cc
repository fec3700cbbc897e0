// NfsUrl (origin/nfs_url.h): parsing and validating nfs:// URLs, and the
// export candidates a URL's path gives. No server needed.
#include "origin/nfs_url.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hoard {
namespace {

// The parse error of `url`, which must be kInvalidArgument.
std::string ParseError(const std::string& url) {
  Result<NfsUrl> u = NfsUrl::Parse(url);
  EXPECT_FALSE(u.ok()) << url;
  if (u.ok()) return "";
  EXPECT_EQ(u.status().code(), Code::kInvalidArgument) << url << ": " << u.status().ToString();
  return u.status().message();
}

TEST(NfsUrlTest, ParsesHostPortPathAndMountPort) {
  auto u = NfsUrl::Parse("nfs://10.0.0.5:20490/srv//data/imagenet/?mountport=20491");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 20490);
  EXPECT_EQ(u->mount_port, 20491);
  EXPECT_EQ(u->path, "/srv/data/imagenet");

  u = NfsUrl::Parse("nfs://storage.example/export");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "storage.example");
  EXPECT_EQ(u->port, 0);
  EXPECT_EQ(u->mount_port, 0);
  EXPECT_EQ(u->path, "/export");

  u = NfsUrl::Parse("nfs://[fd00::1]:2049/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "fd00::1");
  EXPECT_EQ(u->port, 2049);
  EXPECT_EQ(u->path, "/");

  u = NfsUrl::Parse("nfs://h/with space/naïve");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->path, "/with space/naïve");
}

TEST(NfsUrlTest, ExportCandidatesAreThePathAndItsParentsLongestFirst) {
  auto u = NfsUrl::Parse("nfs://h:1/srv/data/imagenet");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->ExportCandidates(), (std::vector<std::string>{"/srv/data/imagenet", "/srv/data", "/srv", "/"}));
  EXPECT_EQ(u->BelowExport("/srv/data/imagenet"), "");
  EXPECT_EQ(u->BelowExport("/srv"), "data/imagenet");
  EXPECT_EQ(u->BelowExport("/"), "srv/data/imagenet");
  u = NfsUrl::Parse("nfs://h/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->ExportCandidates(), (std::vector<std::string>{"/"}));
  EXPECT_EQ(u->BelowExport("/"), "");
}

TEST(NfsUrlTest, PortsAtTheirLimits) {
  auto u = NfsUrl::Parse("nfs://h:1/p?mountport=65535");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->port, 1);
  EXPECT_EQ(u->mount_port, 65535);
  u = NfsUrl::Parse("nfs://h/p?mountport=635");  // mountport without a port
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 0);
  EXPECT_EQ(u->mount_port, 635);
  u = NfsUrl::Parse("nfs://[::1]/p");  // IPv6 without a port
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 0);
}

TEST(NfsUrlTest, BadPortsAreRefused) {
  for (const char* url :
       {"nfs://h:/p", "nfs://h:0/p", "nfs://h:65536/p", "nfs://h:-1/p", "nfs://h:+1/p", "nfs://h:1x/p", "nfs://h: 1/p",
        "nfs://h:99999999999/p", "nfs://[::1]:/p", "nfs://[::1]:x/p"}) {
    EXPECT_NE(ParseError(url).find("port"), std::string::npos) << url;
  }
}

TEST(NfsUrlTest, MissingPartsAreRefused) {
  EXPECT_NE(ParseError("nfs://").find("no path"), std::string::npos);
  EXPECT_NE(ParseError("nfs://host").find("no path"), std::string::npos);
  EXPECT_NE(ParseError("nfs://host?mountport=1").find("no path"), std::string::npos);
  EXPECT_NE(ParseError("nfs:///export").find("no host"), std::string::npos);
  EXPECT_NE(ParseError("nfs://:2049/export").find("no host"), std::string::npos);
  EXPECT_NE(ParseError("nfs://[]/export").find("no host"), std::string::npos);
}

TEST(NfsUrlTest, WrongSchemeIsRefused) {
  for (const char* url : {"", "/srv/data", "nfs:/h/p", "NFS://h/p", "http://h/p", " nfs://h/p"}) {
    EXPECT_NE(ParseError(url).find("nfs://"), std::string::npos) << url;
  }
}

TEST(NfsUrlTest, BadCharactersInTheHostAreRefused) {
  for (const char* url : {"nfs://user@h/p", "nfs://h h/p", "nfs://h#x/p", "nfs://[::1/p", "nfs://[::1]x/p",
                          "nfs://[a b]/p", "nfs://[a@b]/p"}) {
    ParseError(url);
  }
}

TEST(NfsUrlTest, DotComponentsAreRefusedAnywhereInThePath) {
  for (const char* url :
       {"nfs://h/.", "nfs://h/..", "nfs://h/a/../b", "nfs://h/a/./b", "nfs://h/a/..", "nfs://h//../etc"}) {
    EXPECT_NE(ParseError(url).find("bad path component"), std::string::npos) << url;
  }
  // Names that merely start with dots are ordinary names.
  auto u = NfsUrl::Parse("nfs://h/.hidden/.../x..");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->path, "/.hidden/.../x..");
}

TEST(NfsUrlTest, PathsAreNormalisedNotDecoded) {
  auto u = NfsUrl::Parse("nfs://h///");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->path, "/");
  u = NfsUrl::Parse("nfs://h/a%20b//c/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->path, "/a%20b/c");  // no %-decoding
}

TEST(NfsUrlTest, OnlyMountportIsAcceptedAsAnOption) {
  auto u = NfsUrl::Parse("nfs://h/p?&mountport=20491&");  // empty parameters are skipped
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->mount_port, 20491);
  u = NfsUrl::Parse("nfs://h/p?");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->mount_port, 0);
  EXPECT_EQ(u->path, "/p");
  EXPECT_NE(ParseError("nfs://h/p?nfsport=1").find("unknown parameter 'nfsport'"), std::string::npos);
  EXPECT_NE(ParseError("nfs://h/p?mountport").find("mountport"), std::string::npos);
  EXPECT_NE(ParseError("nfs://h/p?mountport=").find("mountport"), std::string::npos);
  EXPECT_NE(ParseError("nfs://h/p?mountport=0").find("mountport"), std::string::npos);
  EXPECT_NE(ParseError("nfs://h/p?mountport=1&mountport=x").find("mountport"), std::string::npos);
  // A '?' starts the query even inside what looks like the path.
  EXPECT_NE(ParseError("nfs://h/a?b/c").find("unknown parameter"), std::string::npos);
}

TEST(NfsUrlTest, ErrorsNameTheUrlAndTheSyntax) {
  const std::string msg = ParseError("nfs://h:0/p");
  EXPECT_NE(msg.find("'nfs://h:0/p'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nfs://host[:port]/export/path[?mountport=M]"), std::string::npos) << msg;
}

TEST(NfsUrlTest, BelowExportOfARootUrl) {
  auto u = NfsUrl::Parse("nfs://h/a");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->ExportCandidates(), (std::vector<std::string>{"/a", "/"}));
  EXPECT_EQ(u->BelowExport("/a"), "");
  EXPECT_EQ(u->BelowExport("/"), "a");
}

}  // namespace
}  // namespace hoard
