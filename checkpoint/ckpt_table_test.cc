#include "checkpoint/ckpt_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "common/alloc_budget.h"
#include "common/testing.h"
#include "common/msgpack_codec.h"
#include "proto/envelope.h"

namespace hoard {
namespace {

using proto::CkptLevel;

class CkptTableTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen(uint64_t snapshot_every = 10000) {
    table_.reset();
    auto t = CkptTable::Open({.dir = dir_.Sub("ckpt"),
                              .logger = spdlog::default_logger(),
                              .keep_last = 2,
                              .drain_deadline = std::chrono::seconds(60),
                              .lease = std::chrono::seconds(30),
                              .max_tasks_per_node = 2,
                              .drain_max_bytes_per_s = 1000,
                              .store = {.snapshot_every_records = snapshot_every},
                              .clock = &clock_,
                              .now_unix_ms = [this] { return now_ms_; }});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table_ = std::move(*t);
  }

  // A table whose drain shares the origin with dataset fills: a quarter,
  // at least 1,000 B/s, at most `max` (0 = unlimited).
  void OpenSharing(uint64_t max) {
    table_.reset();
    auto t = CkptTable::Open({.dir = dir_.Sub("share"),
                              .logger = spdlog::default_logger(),
                              .drain_deadline = std::chrono::seconds(60),
                              .drain_max_bytes_per_s = max,
                              .drain_share = 0.25,
                              .drain_min_bytes_per_s = 1000,
                              .clock = &clock_,
                              .now_unix_ms = [this] { return now_ms_; }});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table_ = std::move(*t);
  }

  uint64_t Mk(const std::string& path, bool dir = false) {
    auto e = table_->Create({.path = path, .is_dir = dir});
    EXPECT_TRUE(e.ok()) << path << ": " << e.status().ToString();
    return e.ok() ? e->id : 0;
  }
  Code CreateCode(const std::string& path, bool dir = false) {
    return table_->Create({.path = path, .is_dir = dir}).status().code();
  }
  Code RenameCode(const std::string& from, const std::string& to, bool noreplace = false) {
    return table_->Rename({.from = from, .to = to, .noreplace = noreplace}).status().code();
  }
  Code RemoveCode(const std::string& path, bool dir) {
    return table_->Remove({.path = path, .is_dir = dir}).status().code();
  }
  // Commits one chunk of `size` bytes written by `writer`, replicated on `replica`.
  Status Commit(uint64_t id, uint64_t gen, const std::string& writer = "n1", const std::string& replica = "n2") {
    now_ms_ += 10;
    return table_
        ->Commit({.id = id, .gen = gen, .size = 100, .mtime_ns = 5, .chunk_size = 4096, .checksums = {42},
                  .writer = writer, .replicas = {{replica}}, .replicas_wanted = 2,
                  .level = uint8_t(CkptLevel::kR)})
        .status();
  }
  uint64_t IdOf(const std::string& path) {
    auto e = table_->Lookup(path);
    return e.ok() ? e->id : 0;
  }
  uint8_t LevelOf(const std::string& path) { return table_->Lookup(path)->level; }
  std::vector<std::string> WorkPaths(const std::string& node, std::set<std::string> up = {"n1", "n2", "n3"}) {
    std::vector<std::string> paths;
    for (const auto& t : table_->Work(node, up).drain) paths.push_back(t.entry.path);
    return paths;
  }
  // Reports the upload of the current generation and applies every queued
  // origin operation as done (what the publisher does).
  // job/model.pt: 3 chunks at R (K=2), written by n1, with replicas on n2
  // (chunks 0 and 2) and n3 (chunk 1).
  uint64_t CommitModelAtR() {
    Mk("job", /*dir=*/true);
    const uint64_t f = Mk("job/model.pt");
    Status s = table_->Commit({.id = f, .gen = 1, .size = 9000, .mtime_ns = 5, .chunk_size = 4096,
                               .checksums = {11, 22, 33}, .writer = "n1", .replicas = {{"n2"}, {"n3"}, {"n2"}},
                               .replicas_wanted = 2, .level = uint8_t(CkptLevel::kR)})
                   .status();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return f;
  }
  // job/iter_1/model.pt .. job/iter_N/model.pt, committed (and P if
  // `publish`); their ids.
  std::vector<uint64_t> MkCheckpoints(int n, bool publish) {
    Mk("job", true);
    std::vector<uint64_t> ids;
    for (int i = 1; i <= n; ++i) {
      const std::string dir = "job/iter_" + std::to_string(i);
      Mk(dir, true);
      ids.push_back(Mk(dir + "/model.pt"));
      EXPECT_TRUE(Commit(ids.back(), 1).ok());
      if (publish) DrainAndPublish(dir + "/model.pt");
    }
    return ids;
  }
  // Whether nodes are told to keep the copies of `id`.
  bool Keeps(uint64_t id) {
    auto k = table_->Work("n9", {}).keep_files;
    return std::find(k.begin(), k.end(), id) != k.end();
  }
  void DrainAndPublish(const std::string& path) {
    auto e = table_->Lookup(path);
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE(table_->Drained({.node = "n1", .id = e->id, .gen = e->gen, .ok = true}).ok());
    PublishAll();
  }
  std::vector<OriginOp> PublishAll() {
    std::vector<OriginOp> ops;
    while (auto op = table_->NextOriginOp()) {
      ops.push_back(*op);
      EXPECT_TRUE(table_->OriginOpDone(op->seq, CkptTable::OpOutcome::kDone).ok());
    }
    return ops;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  int64_t now_ms_ = 1'700'000'000'000;
  std::unique_ptr<CkptTable> table_;
};

TEST_F(CkptTableTest, CreateLookupList) {
  Mk("job", true);
  uint64_t b = Mk("job/b");
  uint64_t a = Mk("job/a", true);
  EXPECT_NE(a, b);
  EXPECT_EQ(CreateCode("job/a", true), Code::kAlreadyExists);
  EXPECT_EQ(CreateCode("job/missing/x"), Code::kNotFound);
  EXPECT_EQ(CreateCode("job/b/x"), Code::kNotDirectory);
  EXPECT_EQ(CreateCode("job//x"), Code::kInvalidArgument);
  EXPECT_EQ(CreateCode(""), Code::kInvalidArgument);
  auto list = table_->List("job");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->children.size(), 2u);
  EXPECT_EQ(list->children[0].path, "job/a");
  EXPECT_TRUE(list->children[0].is_dir);
  EXPECT_EQ(list->children[1].path, "job/b");
  EXPECT_EQ(list->children[1].level, uint8_t(CkptLevel::kNone));
  EXPECT_EQ(table_->List("job/b").status().code(), Code::kNotDirectory);
  EXPECT_TRUE(table_->Lookup("").ok());
  EXPECT_EQ(table_->Lookup("job/zzz").status().code(), Code::kNotFound);
}

TEST_F(CkptTableTest, RenameFollowsPosix) {
  Mk("job", true);
  Mk("job/d", true);
  const uint64_t f = Mk("job/d/f");
  Mk("job/d/sub", true);
  Mk("job/g");
  Mk("job/empty", true);
  Mk("job/full", true);
  Mk("job/full/x");
  EXPECT_EQ(RenameCode("job/d", "job/d/sub/in"), Code::kInvalidArgument);
  EXPECT_EQ(RenameCode("job/d", "job/d/sub"), Code::kInvalidArgument);  // also into itself
  EXPECT_EQ(RenameCode("job/d", "job/full"), Code::kNotEmpty);
  EXPECT_EQ(RenameCode("job/d", "job/g"), Code::kNotDirectory);
  EXPECT_EQ(RenameCode("job/g", "job/empty"), Code::kIsDirectory);
  EXPECT_EQ(RenameCode("job/g", "job/d/f", true), Code::kAlreadyExists);
  EXPECT_EQ(RenameCode("job/nope", "job/x"), Code::kNotFound);
  EXPECT_EQ(RenameCode("job/g", "job/nodir/x"), Code::kNotFound);
  // Replacing a file: the target's id is gone, the source keeps its id.
  const uint64_t g = IdOf("job/g");
  ASSERT_EQ(RenameCode("job/g", "job/d/f"), Code::kOk);
  EXPECT_EQ(IdOf("job/d/f"), g);
  EXPECT_EQ(table_->Commit({.id = f, .gen = 1, .writer = "n1", .level = 1}).status().code(), Code::kNotFound);
  // A whole subtree moves, onto an empty directory.
  ASSERT_EQ(RenameCode("job/d", "job/empty"), Code::kOk);
  EXPECT_EQ(IdOf("job/empty/f"), g);
  EXPECT_TRUE(table_->Lookup("job/empty/sub").ok());
  EXPECT_EQ(table_->Lookup("job/d").status().code(), Code::kNotFound);
  auto moved = table_->Rename({.from = "job/empty", .to = "job2"});
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->path, "job2");
  EXPECT_EQ(IdOf("job2/f"), g);
}

TEST_F(CkptTableTest, RemoveFollowsPosix) {
  Mk("job", true);
  Mk("job/d", true);
  Mk("job/d/f");
  EXPECT_EQ(RemoveCode("job/d", true), Code::kNotEmpty);
  EXPECT_EQ(RemoveCode("job/d", false), Code::kIsDirectory);
  EXPECT_EQ(RemoveCode("job/d/f", true), Code::kNotDirectory);
  EXPECT_EQ(RemoveCode("", true), Code::kInvalidArgument);
  EXPECT_EQ(RemoveCode("job/d/f", false), Code::kOk);
  EXPECT_EQ(RemoveCode("job/d/f", false), Code::kNotFound);
  EXPECT_EQ(RemoveCode("job/d", true), Code::kOk);
}

TEST_F(CkptTableTest, CommitChecksGenerations) {
  Mk("job", true);
  const uint64_t f = Mk("job/f");
  ASSERT_TRUE(Commit(f, 2).ok());
  EXPECT_EQ(Commit(f, 2).code(), Code::kStale);
  EXPECT_EQ(Commit(f, 1).code(), Code::kStale);
  EXPECT_EQ(Commit(IdOf("job"), 3).code(), Code::kIsDirectory);
  auto e = table_->Lookup("job/f");
  EXPECT_EQ(e->gen, 2u);
  EXPECT_EQ(e->size, 100u);
  EXPECT_EQ(e->level, uint8_t(CkptLevel::kR));
  EXPECT_EQ(e->replicas, (std::vector<std::vector<std::string>>{{"n2"}}));
  EXPECT_EQ(table_->Commit({.id = f, .gen = 5, .size = 100, .chunk_size = 4096, .writer = "n1", .level = 2})
                .status()
                .code(),
            Code::kInvalidArgument);  // no checksum for its chunk
}

// A resend (`retry`: its first attempt went to a coordinator that died, and
// may have been applied) that finds its own effect succeeds, and changes
// nothing more; without `retry` the same request is refused, as POSIX says.
TEST_F(CkptTableTest, AResendFindingItsOwnEffectSucceeds) {
  Mk("job", true);
  const uint64_t f = Mk("job/f");
  proto::CkptCommit commit{.id = f, .gen = 2, .size = 100, .mtime_ns = 5, .chunk_size = 4096, .checksums = {42},
                           .writer = "n1", .replicas = {{"n2"}}, .replicas_wanted = 2,
                           .level = uint8_t(CkptLevel::kR)};
  ASSERT_TRUE(table_->Commit(commit).ok());
  EXPECT_EQ(table_->Commit(commit).status().code(), Code::kStale);
  commit.retry = true;
  Result<proto::CkptEntry> resent = table_->Commit(commit);
  ASSERT_TRUE(resent.ok()) << resent.status().ToString();
  EXPECT_EQ(resent->gen, 2u);
  commit.checksums = {43};  // other bytes at that generation: not ours
  EXPECT_EQ(table_->Commit(commit).status().code(), Code::kStale);

  // Create: an entry of the same kind and owner, never committed.
  EXPECT_EQ(CreateCode("job/g"), Code::kOk);
  EXPECT_EQ(CreateCode("job/g"), Code::kAlreadyExists);
  EXPECT_TRUE(table_->Create({.path = "job/g", .retry = true}).ok());
  EXPECT_EQ(table_->Create({.path = "job/g", .is_dir = true, .retry = true}).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(table_->Create({.path = "job/g", .uid = 7, .retry = true}).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(table_->Create({.path = "job/f", .retry = true}).status().code(), Code::kAlreadyExists)
      << "a committed file is someone's save, not a fresh create";
  EXPECT_TRUE(table_->Create({.path = "job", .is_dir = true, .retry = true}).ok());

  // Rename: `from` gone and `to` there.
  ASSERT_EQ(RenameCode("job/g", "job/h"), Code::kOk);
  EXPECT_EQ(RenameCode("job/g", "job/h"), Code::kNotFound);
  Result<proto::CkptEntry> moved = table_->Rename({.from = "job/g", .to = "job/h", .retry = true});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->id, IdOf("job/h"));
  EXPECT_EQ(table_->Rename({.from = "job/x", .to = "job/y", .retry = true}).status().code(), Code::kNotFound);

  // Remove: the path gone.
  ASSERT_EQ(RemoveCode("job/h", false), Code::kOk);
  EXPECT_EQ(RemoveCode("job/h", false), Code::kNotFound);
  Result<uint64_t> removed = table_->Remove({.path = "job/h", .retry = true});
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 0u);
  EXPECT_FALSE(table_->Lookup("job/h").ok());

  // Nothing above was journalled twice: the table reopens to the same state.
  Reopen();
  EXPECT_EQ(table_->Lookup("job/f")->gen, 2u);
  EXPECT_FALSE(table_->Lookup("job/g").ok());
}

// Chunkings no writer makes are refused, and nothing of them is journalled:
// the table reopens (a size whose chunk count wraps to 0 once passed here
// and then made every restart refuse the journal).
TEST_F(CkptTableTest, CommitRefusesChunkingsNoWriterMakes) {
  Mk("job", true);
  const uint64_t f = Mk("job/f");
  auto code = [&](uint64_t size, uint64_t chunk_size, std::vector<uint64_t> checksums) {
    return table_
        ->Commit({.id = f, .gen = 1, .size = size, .chunk_size = chunk_size, .checksums = std::move(checksums),
                  .writer = "n1", .level = 1})
        .status()
        .code();
  };
  EXPECT_EQ(code(UINT64_MAX, 4u << 20, {}), Code::kInvalidArgument);  // (size + cs - 1) wraps to 0 chunks
  EXPECT_EQ(code(UINT64_MAX - 5, 2, {}), Code::kInvalidArgument);
  EXPECT_EQ(code(1ull << 40, 1ull << 40, {7}), Code::kInvalidArgument);  // a chunk no process can buffer
  EXPECT_EQ(code(100, 0, {7}), Code::kInvalidArgument);
  EXPECT_EQ(code(1ull << 30, 4u << 20, std::vector<uint64_t>(256, 1)), Code::kOk);
  Reopen();
  EXPECT_EQ(table_->Lookup("job/f")->size, 1ull << 30);
  EXPECT_EQ(proto::CkptChunkCount(UINT64_MAX, 4u << 20), std::nullopt);
  EXPECT_EQ(proto::CkptChunkCount(0, 0), 0u);
  EXPECT_EQ(proto::CkptChunkCount(4097, 4096), 2u);
  EXPECT_EQ(proto::CkptChunkCount(uint64_t(INT64_MAX), proto::kMaxCkptChunkSize),
            uint64_t(INT64_MAX) / proto::kMaxCkptChunkSize + 1);
}

TEST_F(CkptTableTest, SurvivesReopenAndNeverReusesIds) {
  Mk("job", true);
  Mk("job/d", true);
  const uint64_t f = Mk("job/d/f");
  ASSERT_TRUE(Commit(f, 1).ok());
  ASSERT_EQ(RenameCode("job/d", "job/e"), Code::kOk);
  const uint64_t gone = Mk("job/gone");
  ASSERT_EQ(RemoveCode("job/gone", false), Code::kOk);
  Reopen();
  EXPECT_EQ(IdOf("job/e/f"), f);
  EXPECT_EQ(table_->Lookup("job/e/f")->gen, 1u);
  EXPECT_EQ(table_->Lookup("job/d").status().code(), Code::kNotFound);
  EXPECT_GT(Mk("job/new"), gone);
}

TEST_F(CkptTableTest, SnapshotsAndReplayAgree) {
  Reopen(/*snapshot_every=*/3);
  Mk("job", true);
  for (int i = 0; i < 10; ++i) {
    const uint64_t id = Mk("job/f" + std::to_string(i));
    ASSERT_TRUE(Commit(id, 1).ok());
  }
  ASSERT_EQ(RenameCode("job/f3", "job/g3"), Code::kOk);
  Reopen(3);
  auto list = table_->List("job");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->children.size(), 10u);
  EXPECT_EQ(table_->Lookup("job/g3")->gen, 1u);
  EXPECT_EQ(table_->Lookup("job/f3").status().code(), Code::kNotFound);
}

TEST_F(CkptTableTest, TornLastRecordIsCut) {
  Mk("job", true);
  Mk("job/kept");
  table_.reset();
  // A crash in the middle of the next append: half a record at the end.
  const std::string journal = dir_.Sub("ckpt/journal.log");
  int fd = ::open(journal.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  const char torn[] = {40, 0, 0, 0, 1, 2, 3, 4, 'x', 'y'};
  ASSERT_EQ(::write(fd, torn, sizeof torn), static_cast<ssize_t>(sizeof torn));
  ::close(fd);
  Reopen();
  EXPECT_TRUE(table_->Lookup("job/kept").ok());
  Mk("job/after");  // appends after the cut, and replays
  Reopen();
  EXPECT_TRUE(table_->Lookup("job/after").ok());
}

// Records no operation could have written (a damaged journal, replayed by
// the code that replays good ones) are refused at open, not served: a cycle
// of parents would hang every path lookup, an origin operation on ".." would
// publish outside the origin.
TEST_F(CkptTableTest, ImpossibleNamespaceIsCorruption) {
  Mk("job", true);
  table_.reset();
  auto dir = [](uint64_t id, uint64_t parent, const std::string& name) {
    CkptNode n;
    n.id = id;
    n.is_dir = true;
    n.parent = parent;
    n.name = name;
    return n;
  };
  const std::vector<std::pair<std::string, CkptRecord>> damaged = {
      {"cycle", {.put = {dir(100, 101, "a"), dir(101, 100, "b")}}},
      {"self-parent", {.put = {dir(100, 100, "a")}}},
      {"missing parent", {.put = {dir(100, 555, "a")}}},
      {"unsafe name", {.put = {dir(100, 0, "..")}}},
      {"name with a slash", {.put = {dir(100, 0, "a/b")}}},
      {"two entries, one name", {.put = {dir(100, 0, "x"), dir(101, 0, "x")}}},
      {"origin op outside", {.ops_add = {{.seq = 5, .kind = OriginOp::kUnlink, .path = "../../etc/passwd"}}}},
      {"publish from outside", {.ops_add = {{.seq = 5, .kind = OriginOp::kPublish, .from = "/tmp/x", .path = "job/f"}}}},
  };
  for (const auto& [what, record] : damaged) {
    SCOPED_TRACE(what);
    testing::TempDir d;
    {
      CkptStore store(d.path(), {});
      ASSERT_TRUE(store.Open(nullptr).ok());
      ASSERT_TRUE(store.Append(record).ok());
    }
    auto t = CkptTable::Open({.dir = d.path(), .logger = spdlog::default_logger()});
    EXPECT_EQ(t.status().code(), Code::kCorruption);
  }
  // A counter behind the ids in use (a damaged snapshot) is moved past them.
  testing::TempDir d;
  {
    CkptStore store(d.path(), {});
    ASSERT_TRUE(store.Open(nullptr).ok());
    ASSERT_TRUE(store.Append({.next_id = 1, .put = {dir(100, 0, "job")}}).ok());
  }
  auto t = CkptTable::Open({.dir = d.path(), .logger = spdlog::default_logger()});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto e = (*t)->Create({.path = "job/new"});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_GT(e->id, 100u);
  EXPECT_EQ((*t)->Lookup("job")->id, 100u);
}

// A namespace snapshot of `files` files (and a directory per 100) as CkptStore
// writes it: committed files of 16 to 80 chunks, replicas on two nodes, some
// with an older generation kept for a reader.
CkptSnapshot SnapshotOf(int files) {
  CkptSnapshot snap;
  snap.next_id = files * 2 + 10;
  uint64_t dir = 0;
  for (int i = 0; i < files; ++i) {
    if (i % 100 == 0) {
      CkptNode d;
      d.id = ++snap.next_id;
      d.is_dir = true;
      d.mode = 0755;
      d.name = "step-" + std::to_string(i / 100);
      snap.nodes.push_back(d);
      dir = d.id;
    }
    CkptNode f;
    f.id = ++snap.next_id;
    f.parent = dir;
    f.name = "rank-" + std::to_string(i % 100) + ".pt";
    f.mode = 0644;
    f.gen = 3;
    f.level = 2;
    f.chunk_size = 4u << 20;
    const int chunks = 16 + i % 64;
    f.size = uint64_t(chunks) << 22;
    f.writer = "node-" + std::to_string(i % 64);
    for (int c = 0; c < chunks; ++c) {
      f.checksums.push_back(0x9e3779b97f4a7c15ull * (i * 131 + c + 1));
      f.replicas.push_back({"node-" + std::to_string((i + c) % 64)});
    }
    f.replicas_wanted = 2;
    f.mtime_ns = f.ctime_ns = f.atime_ns = 1700000000000000000 + i;
    f.commit_seq = i + 1;
    f.published_gen = 3;
    f.on_origin = true;
    if (i % 10 == 0) f.old_gens.push_back({.gen = 2, .size = f.size, .chunk_size = f.chunk_size,
                                           .checksums = f.checksums, .writer = f.writer, .replicas = f.replicas});
    snap.nodes.push_back(std::move(f));
  }
  return snap;
}

// The decode budget (common/alloc_budget.h) holds a namespace snapshot of
// any size with room to spare: its charge per byte does not grow with the
// entries (so a 10M-entry snapshot, 1<<24 being the array limit, decodes
// too). A journal record of empty maps is Corruption, not gigabytes.
TEST_F(CkptTableTest, SnapshotsDecodeWithinTheBudget) {
  for (int files : {2000, 20000}) {
    const std::string bytes = PackState(SnapshotOf(files));
    size_t peak = 0;
    {
      AllocBudget outer(SIZE_MAX);
      CkptSnapshot decoded;
      UnpackState(bytes.data(), bytes.size(), &decoded);
      EXPECT_EQ(decoded.nodes.size(), size_t(files + files / 100));
      peak = outer.peak();
    }
    const double spare = double(DecodeBudget(bytes.size())) / double(peak);
    printf("checkpoint snapshot of %d files: %zu bytes, charged %.1fx, %.2fx to spare\n", files, bytes.size(),
           double(peak) / double(bytes.size()), spare);
    // 8x: a chunk's replica list is a vector of strings of its own.
    EXPECT_GE(spare, 1.5);
  }

  Mk("job", true);
  table_.reset();
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(1);
  pk.pack(std::string("put"));
  pk.pack_array(60000);
  for (int i = 0; i < 60000; ++i) pk.pack_map(0);
  {
    CkptStore store(dir_.Sub("ckpt"), {});
    ASSERT_TRUE(store.Open(nullptr).ok());
    ASSERT_TRUE(store.TEST_log().Append(std::string_view(buf.data(), buf.size())).ok());
  }
  auto t = CkptTable::Open({.dir = dir_.Sub("ckpt"), .logger = spdlog::default_logger()});
  EXPECT_EQ(t.status().code(), Code::kCorruption);
  EXPECT_NE(t.status().message().find("decoding would take more than"), std::string::npos)
      << t.status().ToString();
}

TEST_F(CkptTableTest, FailedAppendChangesNothing) {
  Mk("job", true);
  table_->TEST_store().TEST_log().TEST_FailNextAppend(ENOSPC, 5);
  EXPECT_EQ(table_->Create({.path = "job/f"}).status().code(), Code::kNoSpace);
  EXPECT_EQ(table_->Lookup("job/f").status().code(), Code::kNotFound);
  Reopen();
  EXPECT_EQ(table_->Lookup("job/f").status().code(), Code::kNotFound);
  EXPECT_TRUE(table_->Lookup("job").ok());
}

TEST_F(CkptTableTest, RebuildListsWhatANodeHoldsWithTheOtherHolders) {
  Mk("job", /*dir=*/true);
  const uint64_t f = Mk("job/model.pt");
  ASSERT_TRUE(table_->Commit({.id = f, .gen = 1, .size = 5000, .mtime_ns = 5, .chunk_size = 4096,
                              .checksums = {11, 22}, .writer = "n1", .replicas = {{"n2"}, {"n3"}},
                              .replicas_wanted = 2, .level = uint8_t(CkptLevel::kR)})
                  .ok());
  EXPECT_TRUE(table_->Work("n2", {"n1", "n2", "n3"}).rebuild.empty()) << "only when asked";
  // A replica holder: its own chunk, from the writer.
  auto n2 = table_->Work("n2", {"n1", "n2", "n3"}, /*rebuild=*/true).rebuild;
  ASSERT_EQ(n2.size(), 1u);
  EXPECT_EQ(n2[0].index, 0u);
  EXPECT_EQ(n2[0].checksum, 11u);
  EXPECT_EQ(n2[0].length, 4096u);
  EXPECT_EQ(n2[0].holders, std::vector<std::string>{"n1"});
  // The writer lost its whole-file copy: every chunk, from the replicas.
  auto n1 = table_->Work("n1", {"n1", "n2", "n3"}, /*rebuild=*/true).rebuild;
  ASSERT_EQ(n1.size(), 2u);
  EXPECT_EQ(n1[1].length, 5000u - 4096u);
  EXPECT_EQ(n1[0].holders, std::vector<std::string>{"n2"});
  EXPECT_EQ(n1[1].holders, std::vector<std::string>{"n3"});
  EXPECT_TRUE(table_->Work("n4", {"n1", "n2", "n3", "n4"}, true).rebuild.empty());
}

// A holder lost before the drain: each chunk it held gets a new holder among
// the up nodes, durably, and that node is sent its rebuild list at once.
TEST_F(CkptTableTest, ChunksOfALostHolderGetANewOneUntilTheFileIsP) {
  const uint64_t f = CommitModelAtR();
  const std::set<std::string> up = {"n1", "n3", "n4", "n5"};
  // n2 only down, not lost: nothing moves (a reboot must not copy everything).
  auto none = table_->Rereplicate(up, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->chunks, 0u);

  auto moved = table_->Rereplicate(up, {"n2"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->files, 1u);
  EXPECT_EQ(moved->chunks, 2u) << "chunks 0 and 2 were on n2";
  auto e = table_->Lookup("job/model.pt");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->replicas.size(), 3u);
  EXPECT_EQ(e->replicas[1], std::vector<std::string>{"n3"}) << "a chunk with its K copies is left alone";
  std::set<std::string> fresh;
  for (uint32_t i : {0u, 2u}) {
    ASSERT_EQ(e->replicas[i].size(), 2u) << i;
    EXPECT_EQ(e->replicas[i][0], "n2") << "the lost node stays listed: it may come back with its disk";
    const std::string& n = e->replicas[i][1];
    EXPECT_TRUE(n == "n3" || n == "n4" || n == "n5") << n;
    fresh.insert(n);
  }
  EXPECT_EQ(std::set<std::string>(moved->nodes.begin(), moved->nodes.end()), fresh);

  // Each new holder gets its list at its next Work, asked for or not, with
  // the holders to fetch from; only once.
  for (const std::string& n : fresh) {
    auto work = table_->Work(n, up);
    ASSERT_FALSE(work.rebuild.empty()) << n;
    for (const auto& ref : work.rebuild) {
      EXPECT_EQ(ref.id, f);
      EXPECT_NE(std::find(ref.holders.begin(), ref.holders.end(), "n1"), ref.holders.end()) << "from the writer";
    }
    EXPECT_TRUE(table_->Work(n, up).rebuild.empty()) << n;
  }
  // Nothing more to do, and the change survives a restart.
  EXPECT_EQ(table_->Rereplicate(up, {"n2"})->chunks, 0u);
  Reopen();
  EXPECT_EQ(table_->Lookup("job/model.pt")->replicas, e->replicas);

  // No copy left to fetch from (every holder down): nothing is assigned.
  const uint64_t g = Mk("job/optim.pt");
  ASSERT_TRUE(Commit(g, 1, "n1", "n2").ok());
  EXPECT_EQ(table_->Rereplicate({"n3", "n4"}, {"n2"})->chunks, 0u);
  // At P the origin holds it: a lost holder changes nothing.
  DrainAndPublish("job/optim.pt");
  EXPECT_EQ(table_->Rereplicate({"n1", "n3", "n4"}, {"n2"})->chunks, 0u);
  EXPECT_EQ(table_->Lookup("job/optim.pt")->replicas[0], std::vector<std::string>{"n2"});

  // A node being drained out of the cluster serves what it has, but takes no
  // new copies.
  const uint64_t h = Mk("job/extra.pt");
  ASSERT_TRUE(Commit(h, 1, "n1", "n2").ok());
  EXPECT_EQ(table_->Rereplicate({"n1", "n3", "n4", "n5"}, {"n2"}, {"n3", "n5"})->chunks, 1u);
  EXPECT_EQ(table_->Lookup("job/extra.pt")->replicas[0], (std::vector<std::string>{"n2", "n4"}));
}

// The level users see: R only while every chunk has K holders that are up
// and, for a holder re-replication gave, that confirmed its copy.
TEST_F(CkptTableTest, AFileShowsLWhileAChunkHasFewerThanKHoldersThatCount) {
  CommitModelAtR();
  auto shown = [&] {
    auto e = table_->Lookup("job/model.pt");
    EXPECT_TRUE(e.ok());
    auto list = table_->List("job");
    EXPECT_TRUE(list.ok() && list->children.size() == 1);
    auto status = table_->GetStatus({.job = "job", .files = true});
    EXPECT_TRUE(status.ok() && status->files.size() == 1);
    const std::string in_list = proto::CkptLevelName(CkptLevel(list->children[0].level));
    std::string counted = "?";
    for (size_t l = 0; l < status->jobs.at(0).files_by_level.size(); ++l) {
      if (status->jobs.at(0).files_by_level[l] == 1) counted = proto::CkptLevelName(CkptLevel(l));
    }
    EXPECT_EQ(in_list, counted) << "files by level in `hoard checkpoint status`";
    EXPECT_EQ(in_list, proto::CkptLevelName(CkptLevel(status->files[0].level))) << "`hoard checkpoint ls`";
    return std::string(proto::CkptLevelName(CkptLevel(e->level))) + in_list;
  };
  EXPECT_EQ(shown(), "RR") << "before any liveness news: as committed";
  table_->SetUpNodes({"n1", "n2", "n3"});
  EXPECT_EQ(shown(), "RR");
  table_->SetUpNodes({"n1", "n3", "n4"});
  EXPECT_EQ(shown(), "LL") << "chunks 0 and 2 have one holder up";
  table_->SetUpNodes({"n2", "n3", "n4"});
  EXPECT_EQ(shown(), "LL") << "the writer down: each chunk has one holder up";
  table_->SetUpNodes({"n1", "n2", "n3", "n4"});
  EXPECT_EQ(shown(), "RR");

  // n2 lost: its chunks get a new holder, which counts once it confirmed it
  // holds its whole rebuild list.
  const std::set<std::string> up = {"n1", "n3", "n4", "n5"};
  table_->SetUpNodes(up);
  auto moved = table_->Rereplicate(up, {"n2"});
  ASSERT_TRUE(moved.ok());
  ASSERT_FALSE(moved->nodes.empty());
  EXPECT_EQ(shown(), "LL") << "new holders have not fetched anything yet";
  std::map<std::string, uint64_t> seq;
  for (const std::string& n : moved->nodes) {
    auto work = table_->Work(n, up);
    ASSERT_NE(work.rebuild_seq, 0u);
    seq[n] = work.rebuild_seq;
  }
  EXPECT_EQ(shown(), "LL") << "the lists are sent, not yet held";
  for (const std::string& n : moved->nodes) (void)table_->Work(n, up, false, 0, seq[n] + 1000);
  EXPECT_EQ(shown(), "LL") << "an echo of another list confirms nothing";
  for (const std::string& n : moved->nodes) (void)table_->Work(n, up, false, 0, seq[n]);
  EXPECT_EQ(shown(), "RR");

  // At P the origin holds it, whoever is down.
  table_->SetUpNodes({});
  EXPECT_EQ(shown(), "LL");
  DrainAndPublish("job/model.pt");
  EXPECT_EQ(shown(), "PP");
}

// A rebuild list longer than one page (the writer holds every chunk of what
// it wrote) goes out a page per reply, each decodable, and together they are
// the whole list; holding a page confirms that page.
TEST_F(CkptTableTest, ALongRebuildListGoesOutAPagePerReply) {
  Mk("job", true);
  constexpr uint32_t kFiles = 20, kChunks = 1000;  // 20,000 chunks: two pages of 16,384
  std::set<std::pair<uint64_t, uint32_t>> want;
  for (uint32_t f = 0; f < kFiles; ++f) {
    const uint64_t id = Mk("job/f" + std::to_string(f));
    Status s = table_->Commit({.id = id, .gen = 1, .size = uint64_t(kChunks) * 4096, .mtime_ns = 5,
                               .chunk_size = 4096, .checksums = std::vector<uint64_t>(kChunks, 7),
                               .writer = "n1", .replicas = std::vector<std::vector<std::string>>(kChunks, {"n2"}),
                               .replicas_wanted = 2, .level = uint8_t(CkptLevel::kR)})
                   .status();
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (uint32_t i = 0; i < kChunks; ++i) want.insert({id, i});
  }
  const std::set<std::string> up = {"n1", "n2"};
  std::set<std::pair<uint64_t, uint32_t>> got;
  uint64_t rebuilt = 0;
  size_t pages = 0;
  for (bool ask = true;; ask = false) {
    proto::CkptWorkReply w = table_->Work("n1", up, ask, 0, rebuilt);
    if (w.rebuild_seq == 0) break;
    ASSERT_LT(++pages, 5u);
    EXPECT_LE(w.rebuild.size(), 16384u);
    const std::string header = proto::EncodeHeader(proto::MsgType::kCkptWorkReply, 1, Status::Ok(), w);
    std::vector<zmq::message_t> frames;
    frames.emplace_back(header.data(), header.size());
    uint64_t id = 0;
    Result<proto::Envelope> env = proto::DecodeMessage(frames, &id);
    ASSERT_TRUE(env.ok()) << env.status().ToString();
    Result<proto::CkptWorkReply> decoded = proto::BodyAs<proto::CkptWorkReply>(*env);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(decoded->rebuild.size(), w.rebuild.size());
    for (const auto& c : decoded->rebuild) EXPECT_TRUE(got.insert({c.id, c.index}).second) << "listed twice";
    rebuilt = w.rebuild_seq;
  }
  EXPECT_EQ(pages, 2u);
  EXPECT_EQ(got, want);
}

// A node that failed its rebuild may echo the number of a list the
// coordinator sent before it restarted: that confirms nothing of the lists
// sent after the restart.
TEST_F(CkptTableTest, AListNumberFromBeforeARestartConfirmsNothing) {
  CommitModelAtR();
  std::set<std::string> up = {"n1", "n3", "n4", "n5"};
  auto shown = [&] {
    table_->SetUpNodes(up);
    return std::string(proto::CkptLevelName(CkptLevel(table_->Lookup("job/model.pt")->level)));
  };
  auto moved = table_->Rereplicate(up, {"n2"});
  ASSERT_TRUE(moved.ok());
  ASSERT_FALSE(moved->nodes.empty());
  std::map<std::string, uint64_t> before;
  for (const std::string& n : moved->nodes) before[n] = table_->Work(n, up).rebuild_seq;
  Reopen();
  std::map<std::string, uint64_t> after;
  for (const std::string& n : moved->nodes) {
    after[n] = table_->Work(n, up).rebuild_seq;
    EXPECT_NE(after[n], before[n]) << n;
  }
  for (const std::string& n : moved->nodes) (void)table_->Work(n, up, false, 0, before[n]);
  EXPECT_EQ(shown(), "L") << "a list number of the previous run confirmed this run's list";
  for (const std::string& n : moved->nodes) (void)table_->Work(n, up, false, 0, after[n]);
  EXPECT_EQ(shown(), "R");
}

// Which new holders have confirmed is journalled: a coordinator restart
// neither counts a holder that had not confirmed nor forgets to send it its
// rebuild list, and a confirmation stays counted.
TEST_F(CkptTableTest, NewHoldersConfirmationsSurviveARestart) {
  CommitModelAtR();
  std::set<std::string> up = {"n1", "n3", "n4", "n5"};
  auto shown = [&] {
    table_->SetUpNodes(up);
    return proto::CkptLevelName(CkptLevel(table_->Lookup("job/model.pt")->level));
  };
  auto moved = table_->Rereplicate(up, {"n2"});
  ASSERT_TRUE(moved.ok());
  ASSERT_FALSE(moved->nodes.empty());
  EXPECT_STREQ(shown(), "L");

  Reopen();  // before any new holder was told
  EXPECT_STREQ(shown(), "L") << "holders that never confirmed count after a restart";
  std::map<std::string, uint64_t> seq;
  for (const std::string& n : moved->nodes) {
    auto work = table_->Work(n, up);  // no periodic ask for the list
    ASSERT_NE(work.rebuild_seq, 0u) << n << " is not told its new copies after a restart";
    EXPECT_FALSE(work.rebuild.empty()) << n;
    seq[n] = work.rebuild_seq;
  }
  for (const std::string& n : moved->nodes) (void)table_->Work(n, up, false, 0, seq[n]);
  EXPECT_STREQ(shown(), "R");

  Reopen();
  EXPECT_STREQ(shown(), "R") << "a confirmation is forgotten at a restart";
  for (const std::string& n : moved->nodes) {
    EXPECT_EQ(table_->Work(n, up).rebuild_seq, 0u) << n << " was confirmed: nothing to tell it";
  }
  // A new generation's holders are the commit's: the old ones' pending
  // confirmations are moot.
  up = {"n3", "n4", "n5"};
  ASSERT_GT(table_->Rereplicate(up, {"n1", "n2"})->chunks, 0u);
  EXPECT_STREQ(shown(), "L");
  auto e = table_->Lookup("job/model.pt");
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(table_->Commit({.id = e->id, .gen = e->gen + 1, .size = 10, .chunk_size = 10, .checksums = {7},
                              .writer = "n3", .replicas = {{"n4"}}, .replicas_wanted = 2,
                              .level = uint8_t(CkptLevel::kR)})
                  .ok());
  EXPECT_STREQ(shown(), "R");
  Reopen();
  EXPECT_STREQ(shown(), "R");
}

TEST_F(CkptTableTest, DrainsOldestFirstAndFlushedJobsFirst) {
  Mk("a", true);
  Mk("b", true);
  ASSERT_TRUE(Commit(Mk("a/1"), 1).ok());
  ASSERT_TRUE(Commit(Mk("a/2"), 1).ok());
  ASSERT_TRUE(Commit(Mk("b/1"), 1).ok());
  ASSERT_TRUE(Commit(Mk("b/2"), 1).ok());
  auto flushed = table_->Flush("b");
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(flushed->undrained_bytes, 200u);
  EXPECT_EQ(flushed->undrained_files, 2u);
  auto work = table_->Work("n1", {"n1", "n2"});
  ASSERT_EQ(work.drain.size(), 2u);  // max_tasks_per_node
  EXPECT_EQ(work.drain[0].entry.path, "b/1");
  EXPECT_EQ(work.drain[1].entry.path, "b/2");
  EXPECT_EQ(work.drain[0].tmp_path, ".hoard-staging/" + std::to_string(IdOf("b/1")) + "-1-n1");
  EXPECT_EQ(work.max_drain_bytes_per_s, 500u);  // split between the two up nodes
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = IdOf("b/1"), .gen = 1, .ok = true}).ok());
  // b/2 was not reported: n1 did not get to it, it comes first again.
  EXPECT_EQ(WorkPaths("n1"), (std::vector<std::string>{"b/2", "a/1"}));
}

TEST_F(CkptTableTest, WriterDownMeansAReplicaHolderDrains) {
  Mk("a", true);
  ASSERT_TRUE(Commit(Mk("a/1"), 1, "n1", "n2").ok());
  EXPECT_TRUE(WorkPaths("n2").empty());  // the writer is up: it drains
  EXPECT_EQ(WorkPaths("n2", {"n2"}), std::vector<std::string>{"a/1"});
  EXPECT_TRUE(WorkPaths("n3", {"n3"}).empty());
}

TEST_F(CkptTableTest, UnreportedTasksAreHandedOutAgain) {
  Mk("a", true);
  ASSERT_TRUE(Commit(Mk("a/1"), 1, "n1", "n2").ok());
  EXPECT_EQ(WorkPaths("n1").size(), 1u);
  // n1 goes down while it may still be uploading: n2 does not get the task
  // before the lease runs out (two uploads of one generation at once).
  EXPECT_TRUE(WorkPaths("n2", {"n2"}).empty());
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_EQ(WorkPaths("n2", {"n2"}).size(), 1u);
  // A failed upload is handed out again at once.
  ASSERT_TRUE(table_->Drained({.node = "n2", .id = IdOf("a/1"), .gen = 1, .ok = false, .error = "x"}).ok());
  EXPECT_EQ(WorkPaths("n2", {"n2"}).size(), 1u);
}

// Issue 28: with the origin full, a round's first upload fails and the round
// ends; the tasks it did not get to were leased until the lease ran out
// (two minutes by default), so a freed origin sat idle that long. A node asks
// again only between rounds: its next ask gets them at once.
TEST_F(CkptTableTest, TasksARoundDidNotGetToAreHandedOutAtTheNextAsk) {
  Mk("a", true);
  ASSERT_TRUE(Commit(Mk("a/1"), 1).ok());
  ASSERT_TRUE(Commit(Mk("a/2"), 1).ok());
  ASSERT_EQ(WorkPaths("n1"), (std::vector<std::string>{"a/1", "a/2"}));
  ASSERT_TRUE(table_->Drained({.node = "n1",
                               .id = IdOf("a/1"),
                               .gen = 1,
                               .ok = false,
                               .error = "NoSpace: write: No space left on device",
                               .at_origin = true})
                  .ok());
  // a/2 was never attempted, nor reported; no time passes.
  EXPECT_EQ(WorkPaths("n1"), (std::vector<std::string>{"a/1", "a/2"}));
}

TEST_F(CkptTableTest, StaleUploadIsDeletedAndNewGenerationDrained) {
  Mk("a", true);
  const uint64_t f = Mk("a/1");
  ASSERT_TRUE(Commit(f, 1).ok());
  EXPECT_EQ(WorkPaths("n1").size(), 1u);
  ASSERT_TRUE(Commit(f, 2).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = true}).ok());
  auto op = table_->NextOriginOp();
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->kind, OriginOp::kUnlink);
  EXPECT_EQ(op->path, CkptTable::StagingPath(f, 1, "n1"));
  auto work = table_->Work("n1", {"n1"});
  ASSERT_EQ(work.drain.size(), 1u);
  EXPECT_EQ(work.drain[0].entry.gen, 2u);
}

TEST_F(CkptTableTest, ALateUploadByAnotherNodeNeverReplacesThePublishedOne) {
  Mk("a", true);
  const uint64_t f = Mk("a/1");
  ASSERT_TRUE(Commit(f, 1, "n1", "n2").ok());
  auto first = table_->Work("n1", {"n1", "n2"});
  ASSERT_EQ(first.drain.size(), 1u);
  clock_.Advance(std::chrono::seconds(31));  // n1 is slow: its lease runs out, n1 goes down
  auto second = table_->Work("n2", {"n2"});
  ASSERT_EQ(second.drain.size(), 1u);
  EXPECT_NE(first.drain[0].tmp_path, second.drain[0].tmp_path);
  ASSERT_TRUE(table_->Drained({.node = "n2", .id = f, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = true}).ok());
  auto ops = PublishAll();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].kind, OriginOp::kPublish);
  EXPECT_EQ(ops[0].from, second.drain[0].tmp_path);
  EXPECT_EQ(ops[1].kind, OriginOp::kUnlink);
  EXPECT_EQ(ops[1].path, first.drain[0].tmp_path);
}

TEST_F(CkptTableTest, PublishIsQueuedAtTheCurrentPathAndRenamesFollowIt) {
  Mk("a", true);
  const uint64_t f = Mk("a/tmp");
  ASSERT_TRUE(Commit(f, 1).ok());
  ASSERT_EQ(RenameCode("a/tmp", "a/final"), Code::kOk);  // not on the origin yet: nothing to mirror
  EXPECT_FALSE(table_->NextOriginOp().has_value());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = true}).ok());
  ASSERT_EQ(RenameCode("a/final", "b"), Code::kOk);
  auto ops = PublishAll();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].kind, OriginOp::kPublish);
  EXPECT_EQ(ops[0].from, CkptTable::StagingPath(f, 1, "n1"));
  EXPECT_EQ(ops[0].path, "a/final");
  EXPECT_EQ(ops[1].kind, OriginOp::kRename);
  EXPECT_EQ(ops[1].from, "a/final");
  EXPECT_EQ(ops[1].path, "b");
  EXPECT_EQ(LevelOf("b"), uint8_t(CkptLevel::kP));
  // The directory was created on the origin for the publish: its rmdir is mirrored.
  ASSERT_EQ(RemoveCode("a", true), Code::kOk);
  ASSERT_EQ(RemoveCode("b", false), Code::kOk);
  ops = PublishAll();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].kind, OriginOp::kRmdir);
  EXPECT_EQ(ops[1].kind, OriginOp::kUnlink);
  EXPECT_EQ(ops[1].path, "b");
}

TEST_F(CkptTableTest, ReplacingAPublishedFileWithAnUnpublishedOneUnlinksIt) {
  Mk("a", true);
  const uint64_t old_file = Mk("a/x");
  ASSERT_TRUE(Commit(old_file, 1).ok());
  DrainAndPublish("a/x");
  ASSERT_TRUE(Commit(Mk("a/y"), 1).ok());
  ASSERT_EQ(RenameCode("a/y", "a/x"), Code::kOk);
  auto ops = PublishAll();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].kind, OriginOp::kUnlink);
  EXPECT_EQ(ops[0].path, "a/x");
}

TEST_F(CkptTableTest, MarkerWaitsForTheRestOfItsDirectory) {
  Mk("job", true);
  Mk("job/step", true);
  const uint64_t data = Mk("job/step/__0_0.distcp");
  ASSERT_TRUE(Commit(data, 1).ok());
  const uint64_t meta = Mk("job/step/.metadata");
  ASSERT_TRUE(Commit(meta, 1).ok());
  const uint64_t latest = Mk("job/latest");
  ASSERT_TRUE(Commit(latest, 1).ok());
  // The markers' uploads finish first: both are held.
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = meta, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = latest, .gen = 1, .ok = true}).ok());
  EXPECT_FALSE(table_->NextOriginOp().has_value());
  // Held markers are not drained again.
  EXPECT_EQ(WorkPaths("n1"), std::vector<std::string>{"job/step/__0_0.distcp"});
  // Held across a restart too.
  Reopen();
  EXPECT_FALSE(table_->NextOriginOp().has_value());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = data, .gen = 1, .ok = true}).ok());
  auto ops = PublishAll();
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].path, "job/step/__0_0.distcp");
  EXPECT_EQ(ops[1].id + ops[2].id, meta + latest);  // both markers after the data
  EXPECT_EQ(LevelOf("job/latest"), uint8_t(CkptLevel::kP));
}

// A file whose publish failed for good (the origin changed behind hoard's
// back) stays below P, and the marker of its directory stays held: whoever
// restores from the origin never follows it to a missing file.
TEST_F(CkptTableTest, MarkerWaitsForItsDirectorysPublishesToSucceed) {
  Mk("job", true);
  const uint64_t data = Mk("job/__0_0.distcp");
  ASSERT_TRUE(Commit(data, 1).ok());
  const uint64_t meta = Mk("job/.metadata");
  ASSERT_TRUE(Commit(meta, 1).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = data, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = meta, .gen = 1, .ok = true}).ok());
  std::optional<OriginOp> op = table_->NextOriginOp();
  ASSERT_TRUE(op.has_value());
  ASSERT_EQ(op->id, data) << "the marker is held until the data is in place";
  ASSERT_TRUE(table_->OriginOpDone(op->seq, CkptTable::OpOutcome::kFailed).ok());
  EXPECT_FALSE(table_->NextOriginOp().has_value());
  EXPECT_NE(LevelOf("job/__0_0.distcp"), uint8_t(CkptLevel::kP));
  EXPECT_NE(LevelOf("job/.metadata"), uint8_t(CkptLevel::kP));
  Reopen();
  EXPECT_FALSE(table_->NextOriginOp().has_value());
}

TEST_F(CkptTableTest, MarkerIgnoresFilesCommittedAfterIt) {
  Mk("job", true);
  const uint64_t meta = Mk("job/.metadata");
  ASSERT_TRUE(Commit(meta, 1).ok());
  ASSERT_TRUE(Commit(Mk("job/later"), 1).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = meta, .gen = 1, .ok = true}).ok());
  auto op = table_->NextOriginOp();
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->id, meta);
}

TEST_F(CkptTableTest, RetentionKeepsTheNewestCheckpointsAndNeverReleasesBeforeP) {
  const std::vector<uint64_t> ids = MkCheckpoints(3, /*publish=*/false);
  const uint64_t marker = Mk("job/latest_checkpointed_iteration.txt");
  ASSERT_TRUE(Commit(marker, 1).ok());
  auto keeps = [&](uint64_t id) { return Keeps(id); };
  // iter_1 is past the newest two but not at P: kept.
  EXPECT_TRUE(keeps(ids[0]));
  DrainAndPublish("job/iter_2/model.pt");
  DrainAndPublish("job/iter_3/model.pt");
  EXPECT_TRUE(keeps(ids[0]));
  EXPECT_EQ(table_->Lookup("job/iter_1/model.pt")->writer, "n1");
  DrainAndPublish("job/iter_1/model.pt");
  EXPECT_FALSE(keeps(ids[0]));
  EXPECT_TRUE(keeps(ids[1]));
  EXPECT_TRUE(keeps(ids[2]));
  auto e = table_->Lookup("job/iter_1/model.pt");
  EXPECT_EQ(e->writer, "");
  EXPECT_EQ(e->replicas, (std::vector<std::vector<std::string>>{{}}));
  EXPECT_EQ(e->level, uint8_t(CkptLevel::kP));
  // A new checkpoint pushes iter_2 out; the marker always stays.
  Mk("job/iter_4", true);
  ASSERT_TRUE(Commit(Mk("job/iter_4/model.pt"), 1).ok());
  DrainAndPublish("job/latest_checkpointed_iteration.txt");
  EXPECT_FALSE(keeps(ids[1]));
  EXPECT_TRUE(keeps(ids[2]));
  EXPECT_TRUE(keeps(marker));
  EXPECT_GE(table_->Work("n9", {}).keep_from_id, marker + 1);
  // Released state survives a restart.
  Reopen();
  EXPECT_FALSE(keeps(ids[0]));
}

// A mount opening a released file for writing (CkptSetAttr::reopen) gets its
// copies kept again, and retention leaves it alone until a commit of it is
// P: the chunks sent ahead for that commit must not be evicted by holders
// whose keep list left the file out.
TEST_F(CkptTableTest, AReopenedFileIsKeptUntilItsNextCommitIsP) {
  const std::vector<uint64_t> ids = MkCheckpoints(3, /*publish=*/true);
  ASSERT_FALSE(Keeps(ids[0])) << "released: past the newest two, and P";
  ASSERT_TRUE(table_->SetAttr({.path = "job/iter_1/model.pt", .reopen = true}).ok());
  EXPECT_TRUE(Keeps(ids[0]));
  Reopen();  // durable
  EXPECT_TRUE(Keeps(ids[0]));
  Mk("job/iter_4", true);
  ASSERT_TRUE(Commit(Mk("job/iter_4/model.pt"), 1).ok());
  DrainAndPublish("job/iter_4/model.pt");
  EXPECT_TRUE(Keeps(ids[0])) << "still being written";
  EXPECT_FALSE(Keeps(ids[1])) << "iter_2 is released as usual";
  // The rewrite commits: kept at R, and at P it is the job's newest
  // checkpoint. Two newer ones later it is released as any other.
  ASSERT_TRUE(Commit(ids[0], 2).ok());
  EXPECT_TRUE(Keeps(ids[0]));
  DrainAndPublish("job/iter_1/model.pt");
  EXPECT_TRUE(Keeps(ids[0]));
  for (const char* dir : {"job/iter_5", "job/iter_6"}) {
    Mk(dir, true);
    ASSERT_TRUE(Commit(Mk(std::string(dir) + "/model.pt"), 1).ok());
    DrainAndPublish(std::string(dir) + "/model.pt");
  }
  EXPECT_FALSE(Keeps(ids[0]));
}

// Opened for writing while still at R, the file reaches P and falls out of
// the newest checkpoints while it is written: not released. A reopen that
// no commit follows (the job only read, or died) holds it for reopen_hold
// (an hour) only.
TEST_F(CkptTableTest, AFileOpenedForWritingIsNotReleasedWhileWrittenNorForever) {
  const std::vector<uint64_t> ids = MkCheckpoints(2, /*publish=*/false);
  ASSERT_TRUE(table_->SetAttr({.path = "job/iter_1/model.pt", .reopen = true}).ok());
  DrainAndPublish("job/iter_1/model.pt");
  DrainAndPublish("job/iter_2/model.pt");
  for (const char* dir : {"job/iter_3", "job/iter_4"}) {
    Mk(dir, true);
    ASSERT_TRUE(Commit(Mk(std::string(dir) + "/model.pt"), 1).ok());
    DrainAndPublish(std::string(dir) + "/model.pt");
  }
  EXPECT_TRUE(Keeps(ids[0])) << "opened for writing: its next commit's chunks must stay";
  EXPECT_FALSE(Keeps(ids[1]));
  now_ms_ += 3'600'001;
  Mk("job/iter_5", true);
  ASSERT_TRUE(Commit(Mk("job/iter_5/model.pt"), 1).ok());
  DrainAndPublish("job/iter_5/model.pt");
  EXPECT_FALSE(Keeps(ids[0])) << "an hour without a commit: released";
  // Reopening a file again and again writes the journal once per half hold.
  const uint64_t records = table_->TEST_store().seq();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(table_->SetAttr({.path = "job/iter_4/model.pt", .reopen = true}).ok());
  EXPECT_EQ(table_->TEST_store().seq(), records + 1);
}

TEST_F(CkptTableTest, LostUploadIsDrainedAgain) {
  Mk("a", true);
  const uint64_t f = Mk("a/1");
  ASSERT_TRUE(Commit(f, 1).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = true}).ok());
  auto op = table_->NextOriginOp();
  ASSERT_TRUE(op.has_value());
  ASSERT_TRUE(table_->OriginOpDone(op->seq, CkptTable::OpOutcome::kUploadLost).ok());
  EXPECT_EQ(LevelOf("a/1"), uint8_t(CkptLevel::kR));
  EXPECT_EQ(WorkPaths("n1"), std::vector<std::string>{"a/1"});
}

// Issue 28: a failing drain is shown per file with its reason and since
// when, per job, and as the origin's health; it all ends once the file is P.
TEST_F(CkptTableTest, DrainErrorsAreShownWithTheirReasonAndSinceWhen) {
  Mk("job", true);
  const uint64_t f = Mk("job/model.pt");
  ASSERT_TRUE(Commit(f, 1).ok());
  ASSERT_TRUE(Commit(Mk("job/other.pt"), 1).ok());
  const int64_t first = now_ms_;
  auto fail = [&] {
    return table_
        ->Drained({.node = "n1",
                   .id = f,
                   .gen = 1,
                   .ok = false,
                   .error = "NoSpace: write '.hoard-staging/1-1-n1': No space left on device",
                   .at_origin = true})
        .status();
  };
  ASSERT_TRUE(fail().ok());
  now_ms_ += 20'000;
  ASSERT_TRUE(fail().ok());

  auto s = table_->GetStatus({.job = "job"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->drain_errors.size(), 1u);
  const proto::CkptDrainError& e = s->drain_errors[0];
  EXPECT_EQ(e.path, "job/model.pt");
  EXPECT_EQ(e.id, f);
  EXPECT_EQ(e.code, uint8_t(Code::kNoSpace));
  EXPECT_EQ(e.reason, "no_space");
  EXPECT_EQ(e.node, "n1");
  EXPECT_EQ(e.since_unix_ms, first) << "since the first failure of the run";
  EXPECT_EQ(e.last_unix_ms, first + 20'000);
  EXPECT_EQ(e.failures, 2u);
  EXPECT_NE(e.error.find("No space left on device"), std::string::npos) << e.error;
  ASSERT_EQ(s->jobs.size(), 1u);
  EXPECT_EQ(s->jobs[0].failing_files, 1u);
  EXPECT_EQ(s->jobs[0].drain_error.reason, "no_space");
  EXPECT_EQ(s->jobs[0].drain_error.since_unix_ms, first);
  EXPECT_EQ(table_->JobSummaries().at(0).failing_files, 1u) << "hoard status shows it too";
  EXPECT_TRUE(s->origin.failing);
  EXPECT_EQ(s->origin.reason, "no_space");
  EXPECT_EQ(s->origin.nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(s->origin.since_unix_ms, first);
  EXPECT_EQ(s->origin.failing_files, 1u);
  EXPECT_TRUE(table_->drain_stats().origin_failing);
  EXPECT_DOUBLE_EQ(table_->drain_stats().origin_failing_s, 20.0);

  // Space was freed: the upload works, the publish too.
  DrainAndPublish("job/model.pt");
  s = table_->GetStatus({.job = "job"});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->drain_errors.empty());
  EXPECT_EQ(s->jobs[0].failing_files, 0u);
  EXPECT_EQ(s->jobs[0].drain_error.since_unix_ms, 0);
  EXPECT_FALSE(s->origin.failing) << s->origin.error;
  EXPECT_FALSE(table_->drain_stats().origin_failing);
}

// A chunk no holder has is the file's error, not the origin's.
TEST_F(CkptTableTest, AMissingChunkIsNotTheOriginsFault) {
  Mk("job", true);
  const uint64_t f = Mk("job/model.pt");
  ASSERT_TRUE(Commit(f, 1).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = false,
                               .error = "NotFound: chunk 0 of checkpoint file 2 gen 1 is on no reachable holder",
                               .at_origin = false})
                  .ok());
  auto s = table_->GetStatus({.job = "job"});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->drain_errors.size(), 1u);
  EXPECT_EQ(s->drain_errors[0].reason, "chunks_missing");
  EXPECT_FALSE(s->origin.failing);
}

// Issue 28: the node's uploads are not where the publisher looks (they see
// different origins): each is lost and the file drained again, forever. The
// fourth upload of the generation makes it a loop: shown as the file's
// error, counted, and logged once (not at every upload).
TEST_F(CkptTableTest, AnUploadLoopIsShownCountedAndLoggedOnce) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  auto logger = std::make_shared<spdlog::logger>("loop-test", sink);
  logger->set_level(spdlog::level::debug);
  table_.reset();
  auto t = CkptTable::Open({.dir = dir_.Sub("loop"), .logger = logger, .clock = &clock_,
                            .now_unix_ms = [this] { return now_ms_; }});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  table_ = std::move(*t);
  Mk("job", true);
  const uint64_t f = Mk("job/model.pt");
  ASSERT_TRUE(Commit(f, 1).ok());
  auto upload_and_lose = [&] {
    auto w = table_->Work("n1", {"n1", "n2"});
    ASSERT_EQ(w.drain.size(), 1u);
    ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = true}).ok());
    auto op = table_->NextOriginOp();
    ASSERT_TRUE(op.has_value());
    ASSERT_EQ(op->kind, OriginOp::kPublish);
    ASSERT_TRUE(table_->OriginOpDone(op->seq, CkptTable::OpOutcome::kUploadLost).ok());
    now_ms_ += 3'000;
  };
  for (int i = 0; i < 3; ++i) upload_and_lose();
  EXPECT_EQ(table_->drain_stats().looping_files, 0u) << "three uploads: not a loop yet";
  for (int i = 0; i < 7; ++i) upload_and_lose();
  EXPECT_EQ(table_->drain_stats().looping_files, 1u);
  EXPECT_EQ(table_->drain_stats().lost_uploads, 10u);
  auto s = table_->GetStatus({.job = "job"});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->drain_errors.size(), 1u);
  EXPECT_EQ(s->drain_errors[0].reason, "upload_lost");
  EXPECT_EQ(s->drain_errors[0].lost_uploads, 10u);
  EXPECT_NE(s->drain_errors[0].error.find(".hoard-staging/" + std::to_string(f) + "-1-n1"), std::string::npos)
      << s->drain_errors[0].error;
  EXPECT_TRUE(s->origin.failing) << "every origin call works, and yet nothing gets there";
  EXPECT_EQ(s->origin.looping_files, 1u);
  int warnings = 0;
  for (const std::string& line : sink->last_formatted()) {
    if (line.find("[warning]") != std::string::npos && line.find("never published") != std::string::npos) {
      ++warnings;
      EXPECT_NE(line.find("same origin"), std::string::npos) << "the warning says why: " << line;
    }
  }
  EXPECT_EQ(warnings, 1) << "at most one a minute";
  // Published at last (the views agree again): it all ends.
  auto w = table_->Work("n1", {"n1", "n2"});
  ASSERT_EQ(w.drain.size(), 1u);
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = f, .gen = 1, .ok = true}).ok());
  PublishAll();
  EXPECT_EQ(LevelOf("job/model.pt"), uint8_t(CkptLevel::kP));
  EXPECT_EQ(table_->drain_stats().looping_files, 0u);
  EXPECT_EQ(table_->drain_stats().failing_files, 0u);
  EXPECT_FALSE(table_->OriginHealth().failing);
}

TEST_F(CkptTableTest, StatusCountsLevelsAndOverdue) {
  Mk("job", true);
  ASSERT_TRUE(Commit(Mk("job/old"), 1).ok());
  const int64_t old_ms = now_ms_;
  ASSERT_TRUE(Commit(Mk("job/done"), 1).ok());
  DrainAndPublish("job/done");
  Mk("job/empty");
  now_ms_ += 61'000;
  auto s = table_->GetStatus({.job = "job", .files = true});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->jobs.size(), 1u);
  const auto& j = s->jobs[0];
  EXPECT_EQ(j.files, 3u);
  EXPECT_EQ(j.bytes, 200u);
  EXPECT_EQ(j.files_by_level, (std::vector<uint64_t>{1, 0, 1, 1}));
  EXPECT_EQ(j.undrained_bytes, 100u);
  EXPECT_EQ(j.undrained_files, 1u);  // "old"; not "empty" (never committed) nor "done" (at P)
  EXPECT_EQ(j.oldest_undrained_unix_ms, old_ms);
  EXPECT_EQ(j.overdue_files, 1u);
  EXPECT_EQ(s->files.size(), 3u);
  EXPECT_EQ(table_->JobSummaries().size(), 1u);
  EXPECT_EQ(table_->GetStatus({.job = "nope"}).status().code(), Code::kNotFound);
}

TEST_F(CkptTableTest, TheDrainLeavesDatasetFillsTheirShare) {
  ASSERT_NO_FATAL_FAILURE(OpenSharing(/*max=*/0));
  Mk("job", true);
  ASSERT_TRUE(Commit(Mk("job/1"), 1).ok());
  EXPECT_EQ(table_->DrainBudget(0), 0u) << "no dataset is filling: unlimited";
  // Datasets fill at 90,000 B/s: the drain gets 30,000 (a quarter of the
  // 120,000 both would move), split among the three up nodes.
  EXPECT_EQ(table_->DrainBudget(90'000), 30'000u);
  EXPECT_EQ(table_->Work("n1", {"n1", "n2", "n3"}, false, 90'000).max_drain_bytes_per_s, 10'000u);
  EXPECT_EQ(table_->DrainBudget(300), 1000u) << "a trickle of dataset reads leaves the drain its floor";
  // A flushed job drains at full speed: the operator asked for it.
  ASSERT_TRUE(table_->Flush("job").ok());
  EXPECT_EQ(table_->DrainBudget(90'000), 0u);
}

TEST_F(CkptTableTest, AnOverdueFileIsNotHeldBackByDatasetFills) {
  ASSERT_NO_FATAL_FAILURE(OpenSharing(/*max=*/50'000));
  Mk("job", true);
  ASSERT_TRUE(Commit(Mk("job/1"), 1).ok());
  EXPECT_EQ(table_->DrainBudget(90'000), 30'000u);
  EXPECT_EQ(table_->DrainBudget(900'000), 50'000u) << "never above --ckpt-drain-max-rate";
  now_ms_ += 61'000;  // past the drain deadline
  EXPECT_EQ(table_->DrainBudget(90'000), 50'000u);
}

}  // namespace
}  // namespace hoard
