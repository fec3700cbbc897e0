// The checkpoint namespace as a POSIX directory (owners, times, links,
// symlinks) and the lifetime of generations: kept while a reader may have
// them open, then their copies deleted on the nodes that hold them.
#include <gtest/gtest.h>

#include "checkpoint/ckpt_table.h"
#include "common/testing.h"

namespace hoard {
namespace {

using proto::CkptLevel;
using namespace std::chrono_literals;

class CkptGensTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    table_.reset();
    auto t = CkptTable::Open({.dir = dir_.Sub("ckpt"),
                              .logger = spdlog::default_logger(),
                              .retire_grace = 15s,
                              .writing_hold = 5s,
                              .clock = &clock_,
                              .now_unix_ms = [this] { return now_ms_; }});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table_ = std::move(*t);
  }
  // Time passes on both clocks (leases and graces, and the wall clock).
  void Pass(std::chrono::milliseconds d) {
    clock_.Advance(d);
    now_ms_ += d.count();
  }
  proto::CkptEntry Mk(const std::string& path, bool dir = false, uint32_t uid = 0, uint32_t gid = 0) {
    auto e = table_->Create({.path = path, .is_dir = dir, .mode = 0750, .uid = uid, .gid = gid});
    EXPECT_TRUE(e.ok()) << path << ": " << e.status().ToString();
    return e.ok() ? *e : proto::CkptEntry{};
  }
  proto::CkptEntry Get(const std::string& path) {
    auto e = table_->Lookup(path);
    EXPECT_TRUE(e.ok()) << path << ": " << e.status().ToString();
    return e.ok() ? *e : proto::CkptEntry{};
  }
  // One chunk at R: the writer's whole file, and a replica on `replica`.
  Status Commit(uint64_t id, uint64_t gen, uint64_t checksum, const std::string& writer = "n1",
                const std::string& replica = "n2", std::vector<uint64_t> chunk_gens = {}, bool writing = false,
                std::vector<proto::CkptReplicaRef> discard = {}) {
    Pass(10ms);
    return table_
        ->Commit({.id = id, .gen = gen, .size = 100, .mtime_ns = now_ms_ * 1'000'000, .chunk_size = 4096,
                  .checksums = {checksum}, .writer = writer, .replicas = {{replica}}, .replicas_wanted = 2,
                  .level = uint8_t(CkptLevel::kR), .chunk_gens = std::move(chunk_gens), .writing = writing,
                  .discard = std::move(discard)})
        .status();
  }
  proto::CkptWorkReply Work(const std::string& node, uint64_t dropped = 0) {
    return table_->Work(node, {"n1", "n2", "n3"}, false, 0, 0, dropped);
  }
  bool Keeps(uint64_t id) {
    auto k = Work("n9").keep_files;
    return std::find(k.begin(), k.end(), id) != k.end();
  }
  // Everything past the grace, and the coordinator's periodic collection.
  size_t Collect() {
    Result<size_t> r = table_->CollectGarbage();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  int64_t now_ms_ = 1'800'000'000'000;
  std::unique_ptr<CkptTable> table_;
};

TEST_F(CkptGensTest, TheCreatorOwnsWhatItCreatesAndChownChangesIt) {
  Mk("job", true, 1000, 100);
  Mk("job/a", false, 1000, 100);
  EXPECT_EQ(Get("job/a").uid, 1000u);
  EXPECT_EQ(Get("job/a").gid, 100u);
  EXPECT_EQ(Get("job/a").mode, 0750u);
  ASSERT_TRUE(table_->SetAttr({.path = "job/a", .set_uid = true, .uid = 7, .set_gid = true, .gid = 8}).ok());
  EXPECT_EQ(Get("job/a").uid, 7u);
  EXPECT_EQ(Get("job/a").gid, 8u);
  // Root owns checkpoints/ itself, sticky and writable by all, like /tmp.
  EXPECT_EQ(Get("").mode, 01777u);
  EXPECT_EQ(Get("").uid, 0u);
}

TEST_F(CkptGensTest, ADirectorysTimesMoveWithWhatIsCreatedRemovedAndRenamedInIt) {
  Mk("job", true);
  Mk("job/d", true);
  const proto::CkptEntry before = Get("job/d");
  Pass(1s);
  Mk("job/d/f");
  const proto::CkptEntry after_create = Get("job/d");
  EXPECT_GT(after_create.mtime_ns, before.mtime_ns);
  EXPECT_GT(after_create.ctime_ns, before.ctime_ns);
  Pass(1s);
  ASSERT_TRUE(table_->Rename({.from = "job/d/f", .to = "job/g"}).ok());
  EXPECT_GT(Get("job/d").mtime_ns, after_create.mtime_ns) << "the source directory";
  EXPECT_EQ(Get("job").mtime_ns, Get("job/d").mtime_ns) << "and the target's";
  EXPECT_EQ(Get("job/g").ctime_ns, Get("job").mtime_ns) << "a rename moves the entry's ctime";
  Pass(1s);
  const int64_t mtime = Get("job").mtime_ns;
  ASSERT_TRUE(table_->Remove({.path = "job/g"}).ok());
  EXPECT_GT(Get("job").mtime_ns, mtime);
}

TEST_F(CkptGensTest, EveryChangeMovesCtimeAndTimesAreKeptApart) {
  Mk("job", true);
  Mk("job/f");
  const proto::CkptEntry e = Get("job/f");
  Pass(1s);
  ASSERT_TRUE(table_->SetAttr({.path = "job/f", .set_mode = true, .mode = 0600}).ok());
  EXPECT_GT(Get("job/f").ctime_ns, e.ctime_ns);
  EXPECT_EQ(Get("job/f").mtime_ns, e.mtime_ns) << "chmod does not touch mtime";
  ASSERT_TRUE(table_->SetAttr({.path = "job/f", .set_mtime = true, .mtime_ns = 1'950'000'000'000'000'000,
                               .set_atime = true, .atime_ns = 1'900'000'000'000'000'000})
                  .ok());
  EXPECT_EQ(Get("job/f").atime_ns, 1'900'000'000'000'000'000);
  EXPECT_EQ(Get("job/f").mtime_ns, 1'950'000'000'000'000'000);
  // Survives a restart.
  Reopen();
  EXPECT_EQ(Get("job/f").atime_ns, 1'900'000'000'000'000'000);
}

TEST_F(CkptGensTest, AReadMovesAtimeOnlyWhenItIsNotNewerThanTheLastChange) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 7).ok());
  Pass(1s);
  const int64_t first = table_->LookupForRead("job/f")->atime_ns;
  EXPECT_GT(first, Get("job/f").mtime_ns);
  Pass(1s);
  EXPECT_EQ(table_->LookupForRead("job/f")->atime_ns, first) << "relatime: already newer than mtime";
  Pass(25h);
  EXPECT_GT(table_->LookupForRead("job/f")->atime_ns, first) << "a day old";
}

TEST_F(CkptGensTest, ADirectoryLinksItsSubdirectories) {
  Mk("job", true);
  EXPECT_EQ(Get("job").nlink, 2u);
  Mk("job/a", true);
  Mk("job/b", true);
  Mk("job/f");
  EXPECT_EQ(Get("job").nlink, 4u);
  EXPECT_EQ(Get("job/f").nlink, 1u);
  EXPECT_EQ(Get("").nlink, 3u);
  ASSERT_TRUE(table_->Rename({.from = "job/a", .to = "job/b/a"}).ok());
  EXPECT_EQ(Get("job").nlink, 3u);
  EXPECT_EQ(Get("job/b").nlink, 3u);
  ASSERT_TRUE(table_->Remove({.path = "job/b/a", .is_dir = true}).ok());
  EXPECT_EQ(Get("job/b").nlink, 2u);
  Reopen();
  EXPECT_EQ(Get("job").nlink, 3u);
}

TEST_F(CkptGensTest, ASymlinkKeepsItsTargetAndReachesTheOrigin) {
  Mk("job", true);
  auto e = table_->Create({.path = "job/latest", .uid = 5, .target = "iter_100"});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(Get("job/latest").is_symlink);
  EXPECT_EQ(Get("job/latest").target, "iter_100");
  EXPECT_EQ(Get("job/latest").uid, 5u);
  std::optional<OriginOp> op = table_->NextOriginOp();
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->kind, OriginOp::kSymlink);
  EXPECT_EQ(op->from, "iter_100");
  EXPECT_EQ(op->path, "job/latest");
  EXPECT_EQ(Commit(e->id, 1, 9).code(), Code::kInvalidArgument) << "a symlink has no bytes to commit";
  EXPECT_EQ(table_->Create({.path = "job/bad", .target = std::string(5000, 'x')}).status().code(),
            Code::kInvalidArgument);
  // Its unlink is mirrored like a file's.
  ASSERT_TRUE(table_->OriginOpDone(op->seq, CkptTable::OpOutcome::kDone).ok());
  ASSERT_TRUE(table_->Remove({.path = "job/latest"}).ok());
  op = table_->NextOriginOp();
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->kind, OriginOp::kUnlink);
  Reopen();  // a journal with symlinks loads
  EXPECT_FALSE(table_->Lookup("job/latest").ok());
}

TEST_F(CkptGensTest, AnOverwrittenGenerationsCopiesAreDeletedOnceNobodyCanReadIt) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11).ok());
  ASSERT_TRUE(Commit(f, 2, 22).ok());
  EXPECT_EQ(Collect(), 0u) << "within the grace a mount may not have told us it reads gen 1";
  Pass(16s);
  EXPECT_EQ(Collect(), 1u);
  // n2 held gen 1's replica; gen 2's is another file.
  proto::CkptWorkReply w = Work("n2");
  ASSERT_EQ(w.drop.size(), 1u);
  EXPECT_EQ(w.drop[0], (proto::CkptReplicaRef{.id = f, .gen = 1, .index = 0, .checksum = 11}));
  EXPECT_TRUE(w.drop_files.empty()) << "n1 wrote both: its copy is gen 2's";
  EXPECT_TRUE(Work("n1").drop.empty());
  // Listed again until done, then forgotten.
  EXPECT_EQ(Work("n2").drop.size(), 1u);
  Work("n2", w.drop_seq);
  EXPECT_EQ(table_->pending_drops(), 0u);
  EXPECT_TRUE(Work("n2").drop.empty());
}

TEST_F(CkptGensTest, AGenerationAMountReadsIsKeptUntilItIsReleased) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11).ok());
  table_->SetSessions({{.id = f, .gen = 1}}, {});
  ASSERT_TRUE(Commit(f, 2, 22).ok());
  Pass(60s);
  EXPECT_EQ(Collect(), 0u);
  EXPECT_TRUE(Work("n2").drop.empty());
  table_->SetSessions({}, {});
  EXPECT_EQ(Collect(), 1u);
  EXPECT_EQ(Work("n2").drop.size(), 1u);
}

TEST_F(CkptGensTest, ACommitReusesUnchangedChunks) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11).ok());
  ASSERT_TRUE(Commit(f, 2, 11, "n1", "n2", {1}).ok());
  EXPECT_EQ(Get("job/f").chunk_gens, std::vector<uint64_t>({1}));
  EXPECT_EQ(proto::CkptChunkGen(Get("job/f"), 0), 1u);
  Pass(16s);
  EXPECT_EQ(Collect(), 1u);
  EXPECT_TRUE(Work("n2").drop.empty()) << "nothing of gen 1 is not gen 2's";
  // The rebuild list names the copy's own generation.
  auto rebuild = table_->Work("n2", {"n1", "n2"}, /*rebuild=*/true).rebuild;
  ASSERT_EQ(rebuild.size(), 1u);
  EXPECT_EQ(rebuild[0].gen, 1u);
  // Reusing what the current generation does not have is refused.
  EXPECT_EQ(Commit(f, 3, 12, "n1", "n2", {1}).code(), Code::kStale) << "other bytes";
  EXPECT_EQ(Commit(f, 3, 11, "n1", "n3", {1}).code(), Code::kStale) << "a holder it never had";
  EXPECT_EQ(Commit(f, 3, 11, "n1", "n2", {2}).code(), Code::kStale) << "a generation that holds nothing";
  EXPECT_TRUE(Commit(f, 3, 11, "n1", "n2", {1}).ok());
}

TEST_F(CkptGensTest, ARemovedFileStaysForItsReadersThenGoesWithItsCopies) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11).ok());
  table_->SetSessions({{.id = f, .gen = 1}}, {});
  ASSERT_TRUE(table_->Remove({.path = "job/f"}).ok());
  EXPECT_EQ(table_->Lookup("job/f").status().code(), Code::kNotFound);
  EXPECT_TRUE(Keeps(f));
  EXPECT_EQ(Commit(f, 2, 12).code(), Code::kNotFound) << "its bytes have nowhere to go";
  Mk("job/f");  // the name is free again
  Reopen();     // an orphan survives a restart, and the restart's grace holds it
  EXPECT_EQ(Collect(), 0u) << "right after a restart nobody has said what it reads yet";
  Pass(60s);
  table_->SetSessions({{.id = f, .gen = 1}}, {});
  EXPECT_EQ(Collect(), 0u);
  table_->SetSessions({}, {});
  EXPECT_EQ(Collect(), 1u);
  EXPECT_FALSE(Keeps(f));
  EXPECT_EQ(Work("n2").drop.size(), 1u);
  auto files = Work("n1").drop_files;
  ASSERT_EQ(files.size(), 1u) << "the writer's whole-file copy goes too";
  EXPECT_EQ(files[0].id, f);
  EXPECT_EQ(files[0].gen, 1u);
}

TEST_F(CkptGensTest, AFileReplacedByARenameIsKeptLikeARemovedOne) {
  Mk("job", true);
  const uint64_t old = Mk("job/last.ckpt").id;
  ASSERT_TRUE(Commit(old, 1, 11).ok());
  const uint64_t tmp = Mk("job/tmp").id;
  ASSERT_TRUE(Commit(tmp, 1, 22, "n1", "n3").ok());
  ASSERT_TRUE(table_->Rename({.from = "job/tmp", .to = "job/last.ckpt"}).ok());
  EXPECT_EQ(Get("job/last.ckpt").id, tmp);
  EXPECT_TRUE(Keeps(old));
  Pass(16s);
  EXPECT_EQ(Collect(), 1u);
  EXPECT_FALSE(Keeps(old));
  EXPECT_TRUE(Keeps(tmp));
}

TEST_F(CkptGensTest, AFileOpenForWritingIsNotDrained) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11, "n1", "n2", {}, /*writing=*/true).ok());
  EXPECT_TRUE(Work("n1").drain.empty()) << "committed by an fsync while still being written";
  table_->SetSessions({}, {f});
  Pass(6s);
  EXPECT_TRUE(Work("n1").drain.empty()) << "the mount's session still lists it";
  table_->SetSessions({}, {});
  ASSERT_EQ(Work("n1").drain.size(), 1u);
}

TEST_F(CkptGensTest, SendsACommitDidNotCountAreDeletedOnTheirHolders) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11, "n1", "n2", {}, false,
                     {{.node = "n3", .id = f, .gen = 1, .index = 0, .checksum = 5},
                      {.node = "n2", .id = f, .gen = 1, .index = 0, .checksum = 11}})
                  .ok());
  proto::CkptWorkReply w = Work("n3");
  ASSERT_EQ(w.drop.size(), 1u);
  EXPECT_EQ(w.drop[0].checksum, 5u);
  EXPECT_TRUE(Work("n2").drop.empty()) << "the copy the commit counted is the same file: kept";
}

TEST_F(CkptGensTest, AHeldGenerationsCopiesOutliveTheLaterGenerationsThatShareThem) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11).ok());
  table_->SetSessions({{.id = f, .gen = 1}}, {});  // a reader has gen 1 open
  ASSERT_TRUE(Commit(f, 2, 11, "n1", "n2", {1}).ok());  // the same bytes: gen 1's copy reused
  ASSERT_TRUE(Commit(f, 3, 33).ok());                     // then other bytes
  Pass(16s);
  EXPECT_EQ(Collect(), 1u) << "gen 2, which nobody reads";
  EXPECT_TRUE(Work("n2").drop.empty()) << "its copy is gen 1's, which is held";
  table_->SetSessions({}, {});
  EXPECT_EQ(Collect(), 1u);
  proto::CkptWorkReply w = Work("n2");
  ASSERT_EQ(w.drop.size(), 1u);
  EXPECT_EQ(w.drop[0].gen, 1u);
}

TEST_F(CkptGensTest, ACopyAGenerationStillSharesIsNotDropped) {
  // Three chunks; gen 2 changes only chunk 1 and reuses 0 and 2.
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  auto commit = [&](uint64_t gen, std::vector<uint64_t> sums, std::vector<uint64_t> chunk_gens) {
    Pass(10ms);
    return table_
        ->Commit({.id = f, .gen = gen, .size = 3 * 4096, .chunk_size = 4096, .checksums = std::move(sums),
                  .writer = "n1", .replicas = {{"n2"}, {"n2"}, {"n2"}}, .replicas_wanted = 2,
                  .level = uint8_t(CkptLevel::kR), .chunk_gens = std::move(chunk_gens)})
        .status();
  };
  ASSERT_TRUE(commit(1, {1, 2, 3}, {}).ok());
  ASSERT_TRUE(commit(2, {1, 9, 3}, {1, 2, 1}).ok());
  Pass(16s);
  EXPECT_EQ(Collect(), 1u);
  proto::CkptWorkReply w = Work("n2");
  ASSERT_EQ(w.drop.size(), 1u) << "only gen 1's chunk 1";
  EXPECT_EQ(w.drop[0], (proto::CkptReplicaRef{.id = f, .gen = 1, .index = 1, .checksum = 2}));
  // Drops and kept generations survive a restart until done.
  Reopen();
  EXPECT_EQ(table_->pending_drops(), 1u);
  Work("n2", Work("n2").drop_seq);
  EXPECT_EQ(table_->pending_drops(), 0u);
}

TEST_F(CkptGensTest, ADropThatBecameLiveAgainIsNotHandedOut) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11).ok());
  ASSERT_TRUE(Commit(f, 2, 22).ok());
  Pass(16s);
  EXPECT_EQ(Collect(), 1u);  // n2's gen 1 copy is to go
  // Before n2 asked, the file was committed anew, reusing... nothing of gen
  // 1: still dead. But a generation naming that very copy makes it live.
  ASSERT_TRUE(Commit(f, 3, 11, "n1", "n2").ok());  // other file: gen 3's own copy
  EXPECT_EQ(Work("n2").drop.size(), 1u);
  ASSERT_TRUE(table_->Commit({.id = f, .gen = 4, .size = 100, .chunk_size = 4096, .checksums = {11},
                              .writer = "n1", .replicas = {{"n2"}}, .replicas_wanted = 2,
                              .level = uint8_t(CkptLevel::kR), .chunk_gens = {3}})
                  .ok());
  EXPECT_EQ(Work("n2").drop.size(), 1u) << "gen 1's copy is still dead: gen 3's is another file";
}

TEST_F(CkptGensTest, AFileCommittedWhileOpenForWritingIsNotDrainedRightAfterARestart) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(Commit(f, 1, 11, "n1", "n2", {}, /*writing=*/true).ok());
  Pass(1s);
  Reopen();  // a restart: the mounts have not reported yet
  EXPECT_TRUE(Work("n1").drain.empty());
  Pass(6s);
  EXPECT_EQ(Work("n1").drain.size(), 1u) << "no mount says it is still written";
}

TEST_F(CkptGensTest, AWritingCommitIsDrainableOnceItsMountNoLongerWritesIt) {
  Mk("job", true);
  const uint64_t f = Mk("job/f").id;
  ASSERT_TRUE(table_
                  ->Commit({.id = f, .gen = 1, .size = 100, .chunk_size = 4096, .checksums = {11}, .writer = "n1",
                            .replicas = {{"n2"}}, .replicas_wanted = 2, .level = uint8_t(CkptLevel::kR),
                            .writing = true, .mount = 77})
                  .ok());
  table_->SetSessions({}, {}, /*mount=*/78, {});
  EXPECT_TRUE(Work("n1").drain.empty()) << "another mount's report says nothing of this file";
  table_->SetSessions({}, {}, /*mount=*/77, {});
  EXPECT_EQ(Work("n1").drain.size(), 1u) << "its writer closed it: no need to wait out the hold";
}

TEST_F(CkptGensTest, ASetGroupIdDirectoryGivesItsGroup) {
  Mk("job", true, 0, 50);
  ASSERT_TRUE(table_->SetAttr({.path = "job", .set_mode = true, .mode = 02775}).ok());
  Mk("job/sub", true, 1000, 100);
  Mk("job/file", false, 1000, 100);
  EXPECT_EQ(Get("job/sub").gid, 50u);
  EXPECT_EQ(Get("job/sub").mode & S_ISGID, uint32_t(S_ISGID));
  EXPECT_EQ(Get("job/file").gid, 50u);
  EXPECT_EQ(Get("job/file").uid, 1000u);
}

TEST_F(CkptGensTest, SetAttrOfAnEntryThatLostItsNameChangesNothingElse) {
  Mk("job", true);
  const uint64_t old = Mk("job/a").id;
  Mk("job/b");
  ASSERT_TRUE(table_->Rename({.from = "job/b", .to = "job/a"}).ok());
  EXPECT_EQ(table_->SetAttr({.path = "job/a", .id = old, .set_mode = true, .mode = 0600}).status().code(),
            Code::kNotFound);
  EXPECT_EQ(Get("job/a").mode, 0750u);
}

}  // namespace
}  // namespace hoard
