// One conformance suite for every CkptOrigin (local directory, NFS through a
// real nfs-ganesha, in memory), then what is particular to each.
#include "origin/ckpt_origin.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "testing/mem_ckpt_origin.h"
#include "origin/nfs_ckpt_origin.h"
#include "origin/posix_ckpt_origin.h"
#include "common/file_util.h"
#include "common/testing.h"
#include "testing/nfs_test_server.h"

namespace hoard {
namespace {

using std::chrono::milliseconds;
using testing::PseudoRandomBytes;
using testing::TempDir;

enum class Kind { kPosix, kNfs, kMem };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kPosix:
      return "Posix";
    case Kind::kNfs:
      return "Nfs";
    case Kind::kMem:
      return "Mem";
  }
  return "Unknown";
}

// Writes `bytes` to `path` in pieces of `piece` bytes, last piece first, so
// every implementation must handle writes at arbitrary offsets and holes
// that are filled later.
Status Upload(CkptOrigin& origin, std::string_view path, const std::string& bytes, size_t piece) {
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<CkptWriter> w, origin.Create(path));
  std::vector<size_t> offsets;
  for (size_t off = 0; off < bytes.size(); off += piece) offsets.push_back(off);
  for (auto it = offsets.rbegin(); it != offsets.rend(); ++it) {
    const size_t n = std::min(piece, bytes.size() - *it);
    HOARD_RETURN_IF_ERROR(w->WriteAt(*it, bytes.data() + *it, n));
  }
  return w->Close();
}

Result<std::string> ReadBack(CkptOrigin& origin, std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<OriginFile> f, origin.Open(path));
  std::string out;
  char buf[1 << 16];
  while (true) {
    HOARD_ASSIGN_OR_RETURN(size_t n, f->ReadAt(out.size(), sizeof(buf), buf));
    if (n == 0) return out;
    out.append(buf, n);
  }
}

class CkptOriginTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::kPosix: {
        // A directory that does not exist yet: OpenCkptOrigin creates it.
        root_ = tmp_.Sub("origin/root");
        auto o = OpenCkptOrigin(root_);
        ASSERT_TRUE(o.ok()) << o.status().ToString();
        origin_ = std::move(*o);
        break;
      }
      case Kind::kNfs: {
        std::string skip = NfsTestServer::ShouldSkip();
        if (!skip.empty()) GTEST_SKIP() << skip;
        root_ = tmp_.Sub("export");
        ASSERT_TRUE(hoard::MakeDirs(root_).ok());
        Status s = server_.Start(tmp_.Sub("server"), root_, 0, "NFS_SERVER_ACCESS=RW");
        ASSERT_TRUE(s.ok()) << s.ToString();
        auto o = OpenCkptOrigin(server_.url(), options_);
        ASSERT_TRUE(o.ok()) << o.status().ToString();
        origin_ = std::move(*o);
        break;
      }
      case Kind::kMem:
        origin_ = std::make_unique<MemCkptOrigin>();
        ASSERT_TRUE(origin_->MakeDirs(kCkptStagingDir).ok());
        break;
    }
  }

  void TearDown() override {
    origin_.reset();
    if (GetParam() == Kind::kNfs) {
      EXPECT_TRUE(server_.Stop().ok());
    }
  }

  Code CodeOf(const Status& s) { return s.code(); }
  Status Put(std::string_view path, const std::string& bytes) { return Upload(*origin_, path, bytes, 1 << 20); }
  std::string Get(std::string_view path) {
    auto r = ReadBack(*origin_, path);
    EXPECT_TRUE(r.ok()) << path << ": " << r.status().ToString();
    return r.ok() ? *r : "";
  }

  TempDir tmp_{"hoard-ckpt-origin"};
  std::string root_;
  OriginOptions options_{.timeout_ms = 2000};
  NfsTestServer server_;
  std::unique_ptr<CkptOrigin> origin_;
};

TEST_P(CkptOriginTest, StagingDirectoryExists) {
  auto st = origin_->Stat(kCkptStagingDir);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->type, EntryType::kDir);
}

TEST_P(CkptOriginTest, WritesAtOffsetsReadBackEqual) {
  // Larger than ganesha's 1 MiB WRITE limit, in pieces that are not aligned.
  const std::string bytes = PseudoRandomBytes(3 * 1024 * 1024 + 4321, 1);
  ASSERT_TRUE(origin_->MakeDirs("job/step-1").ok());
  Status s = Upload(*origin_, "job/step-1/model.pt", bytes, 1'000'003);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto st = origin_->Stat("job/step-1/model.pt");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->type, EntryType::kFile);
  EXPECT_EQ(st->size, bytes.size());
  EXPECT_TRUE(Get("job/step-1/model.pt") == bytes);

  // One write larger than the server's wsize, then Create truncates.
  s = Upload(*origin_, "job/step-1/model.pt", bytes, bytes.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Get("job/step-1/model.pt") == bytes);
  ASSERT_TRUE(Put("job/step-1/model.pt", "short").ok());
  EXPECT_EQ(Get("job/step-1/model.pt"), "short");
  EXPECT_EQ(origin_->Stat("job/step-1/model.pt")->size, 5u);
}

TEST_P(CkptOriginTest, EmptyFile) {
  auto w = origin_->Create("empty");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(origin_->Stat("empty")->size, 0u);
  EXPECT_EQ(Get("empty"), "");
}

TEST_P(CkptOriginTest, RenameReplacesAFileAtomically) {
  const std::string old_bytes = PseudoRandomBytes(300'000, 2);
  const std::string new_bytes = PseudoRandomBytes(500'000, 3);
  ASSERT_TRUE(origin_->MakeDirs("job").ok());
  ASSERT_TRUE(Put("job/latest", old_bytes).ok());

  // A reader of the published path sees the old bytes or the new, whole.
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, torn{0};
  std::thread reader([&] {
    while (!stop) {
      auto r = ReadBack(*origin_, "job/latest");
      if (!r.ok()) continue;  // replaced between open and read (kStale on NFS)
      ++reads;
      if (*r != old_bytes && *r != new_bytes) ++torn;
    }
  });
  for (int i = 0; i < 3; ++i) {
    const std::string& bytes = i % 2 == 0 ? new_bytes : old_bytes;
    const std::string staged = std::string(kCkptStagingDir) + "/7-" + std::to_string(i);
    ASSERT_TRUE(Put(staged, bytes).ok());
    Status s = origin_->Rename(staged, "job/latest");
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(origin_->Stat(staged).status().code(), Code::kNotFound);
  }
  EXPECT_TRUE(testing::Eventually([&] { return reads >= 3; }));
  stop = true;
  reader.join();
  EXPECT_EQ(torn, 0);
  EXPECT_TRUE(Get("job/latest") == new_bytes);
}

TEST_P(CkptOriginTest, RenameDirectories) {
  ASSERT_TRUE(origin_->MakeDirs("a/x").ok());
  ASSERT_TRUE(Put("a/x/f", "f").ok());
  ASSERT_TRUE(origin_->MakeDirs("b").ok());
  // Onto an empty directory: replaced.
  Status s = origin_->Rename("a", "b");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Get("b/x/f"), "f");
  EXPECT_EQ(origin_->Stat("a").status().code(), Code::kNotFound);
  // Onto a non-empty directory: refused, both intact.
  ASSERT_TRUE(origin_->MakeDirs("c").ok());
  ASSERT_TRUE(Put("c/g", "g").ok());
  EXPECT_EQ(origin_->Rename("c", "b").code(), Code::kNotEmpty);
  EXPECT_EQ(Get("b/x/f"), "f");
  EXPECT_EQ(Get("c/g"), "g");
  // A file onto a directory, a directory onto a file.
  EXPECT_EQ(origin_->Rename("c/g", "b").code(), Code::kIsDirectory);
  EXPECT_EQ(origin_->Rename("b", "c/g").code(), Code::kNotDirectory);
  // Missing source, missing target parent.
  EXPECT_EQ(origin_->Rename("nope", "d").code(), Code::kNotFound);
  EXPECT_EQ(origin_->Rename("c/g", "nope/g").code(), Code::kNotFound);
  EXPECT_EQ(Get("c/g"), "g");
}

TEST_P(CkptOriginTest, MakeDirsIsIdempotent) {
  ASSERT_TRUE(origin_->MakeDirs("j/a/b/c").ok());
  ASSERT_TRUE(origin_->MakeDirs("j/a/b/c").ok());
  ASSERT_TRUE(origin_->MakeDirs("j/a").ok());
  ASSERT_TRUE(origin_->MakeDirs("").ok());
  EXPECT_EQ(origin_->Stat("j/a/b/c")->type, EntryType::kDir);
  ASSERT_TRUE(Put("j/file", "x").ok());
  EXPECT_EQ(origin_->MakeDirs("j/file").code(), Code::kNotDirectory);
  EXPECT_EQ(origin_->MakeDirs("j/file/sub").code(), Code::kNotDirectory);
}

TEST_P(CkptOriginTest, UnlinkAndRmdir) {
  ASSERT_TRUE(origin_->MakeDirs("d/sub").ok());
  ASSERT_TRUE(Put("d/f", "x").ok());
  EXPECT_EQ(origin_->Unlink("d/missing").code(), Code::kNotFound);
  EXPECT_EQ(origin_->Unlink("d/sub").code(), Code::kIsDirectory);
  EXPECT_EQ(origin_->Rmdir("d/f").code(), Code::kNotDirectory);
  EXPECT_EQ(origin_->Rmdir("d").code(), Code::kNotEmpty);
  EXPECT_EQ(origin_->Rmdir("d/missing").code(), Code::kNotFound);
  ASSERT_TRUE(origin_->Unlink("d/f").ok());
  ASSERT_TRUE(origin_->Rmdir("d/sub").ok());
  ASSERT_TRUE(origin_->Rmdir("d").ok());
  EXPECT_EQ(origin_->Stat("d").status().code(), Code::kNotFound);
}

TEST_P(CkptOriginTest, MissingParentIsNotFound) {
  EXPECT_EQ(origin_->Create("no/such/file").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Stat("no/such").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Open("no/such").status().code(), Code::kNotFound);
  EXPECT_EQ(origin_->Unlink("no/such").code(), Code::kNotFound);
  EXPECT_EQ(origin_->Rmdir("no/such").code(), Code::kNotFound);
}

TEST_P(CkptOriginTest, BadPathsAreInvalidArguments) {
  ASSERT_TRUE(origin_->MakeDirs("ok").ok());
  const std::string with_nul("ok/a\0b", 6);
  for (const std::string& bad : {std::string(".."), std::string("ok/../.."), std::string("/etc/passwd"),
                                 std::string("ok//x"), std::string("ok/"), std::string("./ok"), with_nul}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(origin_->Create(bad).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->MakeDirs(bad).code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->Rename("ok", bad).code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->Rename(bad, "ok2").code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->Unlink(bad).code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->Rmdir(bad).code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->Stat(bad).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(origin_->Open(bad).status().code(), Code::kInvalidArgument);
  }
  // The root itself can be neither created, renamed nor removed.
  EXPECT_EQ(origin_->Create("").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_->Rmdir("").code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_->Rename("", "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(origin_->Stat("ok")->type, EntryType::kDir);  // nothing was touched
}

TEST_P(CkptOriginTest, FreeBytes) {
  auto free = origin_->FreeBytes();
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_GT(*free, 0u);
}

INSTANTIATE_TEST_SUITE_P(All, CkptOriginTest, ::testing::Values(Kind::kPosix, Kind::kNfs, Kind::kMem), KindName);

// --- POSIX only.

TEST(PosixCkptOriginTest, SymlinksInTheTreeAreNotFollowed) {
  TempDir tmp("hoard-ckpt-posix");
  TempDir outside("hoard-ckpt-outside");
  auto o = OpenCkptOrigin(tmp.path());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(::symlink(outside.path().c_str(), tmp.Sub("link").c_str()), 0);
  EXPECT_EQ((*o)->Create("link/x").status().code(), Code::kNotDirectory);
  EXPECT_EQ((*o)->MakeDirs("link/y").code(), Code::kNotDirectory);
  EXPECT_EQ((*o)->Rename(std::string(kCkptStagingDir), "link/z").code(), Code::kNotDirectory);
  struct stat st;
  EXPECT_NE(::stat(JoinPath(outside.path(), "x").c_str(), &st), 0);
  EXPECT_NE(::stat(JoinPath(outside.path(), "y").c_str(), &st), 0);
}

// The origin's path comes to name another directory under a running daemon
// (a file system mounted over it; here the directory is moved away and a new
// one made, which is the same to the origin: another directory at the path).
// Every handle, opened before or after, then works in the new one, so an
// upload one process makes is where another looks for it (issue 28: a node
// that opened its origin after a remount uploaded into the new file system
// while the coordinator, opened before, looked in the covered directory, and
// the node uploaded the same file again and again).
TEST(PosixCkptOriginTest, APathMountedAnewIsFollowedByEveryHandle) {
  TempDir tmp("hoard-ckpt-posix");
  const std::string root = tmp.Sub("origin");
  auto before = OpenCkptOrigin(root);  // the coordinator, started before
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(::rename(root.c_str(), tmp.Sub("covered").c_str()), 0);
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  auto after = OpenCkptOrigin(root);  // a node, opening it now
  ASSERT_TRUE(after.ok()) << after.status().ToString();

  const std::string tmp_path = std::string(kCkptStagingDir) + "/7-1-node1";
  ASSERT_TRUE(Upload(**after, tmp_path, "the bytes", 4).ok());
  // The other handle finds the upload, publishes it, and that lands in the
  // directory at the path, not the old one.
  Result<OriginEntry> st = (*before)->Stat(tmp_path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE((*before)->MakeDirs("job").ok());
  ASSERT_TRUE((*before)->Rename(tmp_path, "job/model.pt").ok());
  Result<std::string> got = ReadFile(JoinPath(root, "job/model.pt"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "the bytes");
  struct stat ignored;
  EXPECT_NE(::stat(JoinPath(tmp.Sub("covered"), "job").c_str(), &ignored), 0) << "written to the old directory";
}

// A handle opened before the remount writes its uploads to the new
// directory too, with a staging directory made for it there.
TEST(PosixCkptOriginTest, AnOldHandleUploadsIntoTheDirectoryMountedAnew) {
  TempDir tmp("hoard-ckpt-posix");
  const std::string root = tmp.Sub("origin");
  auto o = OpenCkptOrigin(root);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(::rename(root.c_str(), tmp.Sub("covered").c_str()), 0);
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);  // no staging directory in it
  const std::string tmp_path = std::string(kCkptStagingDir) + "/8-2-node2";
  Status s = Upload(**o, tmp_path, "more bytes", 3);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Result<std::string> got = ReadFile(JoinPath(root, tmp_path));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "more bytes");
}

TEST(PosixCkptOriginTest, RelativeSourceIsRefused) {
  EXPECT_EQ(OpenCkptOrigin("relative/dir").status().code(), Code::kInvalidArgument);
}

// --- NFS only.

TEST(NfsCkptOriginTest, UnreachableServerIsUnavailableWithinTheTimeout) {
  std::string skip = NfsTestServer::ShouldSkip();
  if (!skip.empty()) GTEST_SKIP() << skip;
  TempDir tmp("hoard-ckpt-nfs");
  const std::string exp = tmp.Sub("export");
  ASSERT_TRUE(MakeDirs(exp).ok());
  NfsTestServer server;
  Status s = server.Start(tmp.Sub("server"), exp, 0, "NFS_SERVER_ACCESS=RW");
  ASSERT_TRUE(s.ok()) << s.ToString();
  OriginOptions options{.timeout_ms = 1000};
  auto o = OpenCkptOrigin(server.url(), options);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  CkptOrigin& origin = **o;
  auto w = origin.Create(".hoard-staging/1-1");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->WriteAt(0, "abc", 3).ok());

  ASSERT_TRUE(server.Stop().ok());
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ((*w)->WriteAt(3, "def", 3).code(), Code::kUnavailable);
  EXPECT_EQ((*w)->Close().code(), Code::kUnavailable);
  EXPECT_EQ(origin.Create(".hoard-staging/2-1").status().code(), Code::kUnavailable);
  EXPECT_EQ(origin.Rename(".hoard-staging/1-1", "x").code(), Code::kUnavailable);
  EXPECT_EQ(origin.MakeDirs("d").code(), Code::kUnavailable);
  EXPECT_EQ(origin.FreeBytes().status().code(), Code::kUnavailable);
  EXPECT_EQ(OpenCkptOrigin(server.url(), options).status().code(), Code::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(7 * 3 * options.timeout_ms));

  // Back on the same port: the same origin works again.
  s = server.Restart();
  ASSERT_TRUE(s.ok()) << s.ToString();
  // The writer carries on where it failed, and a failed Close can be retried.
  s = (*w)->WriteAt(3, "def", 3);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = (*w)->Close();
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = origin.Rename(".hoard-staging/1-1", "x");
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto back = ReadBack(origin, "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "abcdef");
}

TEST(NfsCkptOriginTest, ReadOnlyExportFailsAtOpenNotLater) {
  std::string skip = NfsTestServer::ShouldSkip();
  if (!skip.empty()) GTEST_SKIP() << skip;
  TempDir tmp("hoard-ckpt-nfs");
  const std::string exp = tmp.Sub("export");
  // The staging directory exists: ganesha still answers its MKDIR with
  // NFS3ERR_ROFS, not NFS3ERR_EXIST, so the open fails at once.
  ASSERT_TRUE(MakeDirs(JoinPath(exp, std::string(kCkptStagingDir))).ok());
  NfsTestServer server;
  Status s = server.Start(tmp.Sub("server"), exp);  // read-only
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto o = OpenCkptOrigin(server.url(), {.timeout_ms = 2000});
  EXPECT_EQ(o.status().code(), Code::kIoError) << o.status().ToString();
  EXPECT_NE(o.status().message().find("ROFS"), std::string::npos) << o.status().ToString();
}

// --- In-memory only: the model of durability and the faults.

TEST(MemCkptOriginTest, UnclosedWritersLeavePartialFiles) {
  MemCkptOrigin origin;
  ASSERT_TRUE(origin.MakeDirs(kCkptStagingDir).ok());
  ASSERT_TRUE(origin.MakeDirs("job").ok());
  {
    auto w = origin.Create(".hoard-staging/1-1");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->WriteAt(0, "half", 4).ok());
    EXPECT_EQ(origin.Stat(".hoard-staging/1-1")->size, 4u);  // written bytes are visible at once
    EXPECT_EQ(origin.Files().count(".hoard-staging/1-1"), 0u);
  }  // destroyed without Close: a crash before fsync
  EXPECT_EQ(origin.PartialFiles(), std::set<std::string>{".hoard-staging/1-1"});
  ASSERT_TRUE(origin.Rename(".hoard-staging/1-1", "job/torn").ok());
  EXPECT_EQ(origin.counters().partial_renames, 1u);

  ASSERT_TRUE(Upload(origin, ".hoard-staging/2-1", "whole", 2).ok());
  ASSERT_TRUE(origin.Rename(".hoard-staging/2-1", "job/good").ok());
  EXPECT_EQ(origin.counters().partial_renames, 1u);
  EXPECT_EQ(origin.counters().renames, 2u);
  EXPECT_EQ(origin.counters().creates, 2u);
  EXPECT_EQ(origin.Files(), (std::map<std::string, std::string>{{"job/good", "whole"}}));
  EXPECT_TRUE(origin.Exists("job/torn"));
  EXPECT_FALSE(origin.Exists(".hoard-staging/2-1"));
  // Creating it again truncates: partial until closed.
  auto w = origin.Create("job/good");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(origin.Files().count("job/good"), 0u);
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(origin.Files().at("job/good"), "");
}

TEST(MemCkptOriginTest, CapacityGivesNoSpace) {
  MemCkptOrigin origin;
  origin.SetCapacity(10);
  EXPECT_EQ(*origin.FreeBytes(), 10u);
  auto w = origin.Create("a");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->WriteAt(0, "12345678", 8).ok());
  EXPECT_EQ((*w)->WriteAt(8, "abc", 3).code(), Code::kNoSpace);
  EXPECT_EQ(origin.Stat("a")->size, 8u);  // refused whole
  EXPECT_EQ(*origin.FreeBytes(), 2u);
  ASSERT_TRUE(origin.Unlink("a").ok());
  EXPECT_EQ(origin.counters().used_bytes, 0u);
  EXPECT_TRUE(Upload(origin, "b", "0123456789", 4).ok());
}

TEST(MemCkptOriginTest, FailNextFailsThatManyCalls) {
  MemCkptOrigin origin;
  ASSERT_TRUE(Upload(origin, "a", "x", 1).ok());
  origin.FailNext(CkptOp::kRename, Status::Unavailable("down"), 2);
  EXPECT_EQ(origin.Rename("a", "b").code(), Code::kUnavailable);
  EXPECT_TRUE(origin.Stat("a").ok());  // a failed call did nothing
  EXPECT_EQ(origin.Rename("a", "b").code(), Code::kUnavailable);
  EXPECT_TRUE(origin.Rename("a", "b").ok());
  origin.FailNext(CkptOp::kAny, Status::IoError("disk"), 1);
  EXPECT_EQ(origin.Stat("b").status().code(), Code::kIoError);
  EXPECT_TRUE(origin.Stat("b").ok());
  origin.FailNext(CkptOp::kWrite, Status::NoSpace("full"), 1);
  EXPECT_EQ(Upload(origin, "c", "y", 1).code(), Code::kNoSpace);
  EXPECT_EQ(origin.PartialFiles(), std::set<std::string>{"c"});
}

TEST(MemCkptOriginTest, DelayAppliesToEveryCall) {
  MemCkptOrigin origin;
  origin.SetDelay(milliseconds(30));
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(origin.MakeDirs("a").ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
}

}  // namespace
}  // namespace hoard
