// Drainer against fakes: a coordinator (a tiny RpcServer answering CkptWork
// and CkptDrained as proto/ckpt_messages.h describes), a checkpoint origin in
// memory (MemCkptOrigin), and a peer (a ReplicaStore served over real RPC).
#include "checkpoint/drainer.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "checkpoint/ckpt_chunk_service.h"
#include "testing/mem_ckpt_origin.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/testing.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using testing::PseudoRandomBytes;

uint64_t Sum(std::string_view s) { return Checksum64(s.data(), s.size()); }

// Answers CkptWork with `work` and records every CkptDrained; a task drained
// ok is not handed out again (it is P now).
class FakeCoordinator {
 public:
  FakeCoordinator(zmq::context_t& ctx, std::shared_ptr<spdlog::logger> log)
      : server_({.endpoint = "tcp://127.0.0.1:0", .name = "fake coordinator", .logger = log, .context = &ctx}) {
    server_.Handle<proto::CkptWork>(
        [this](const proto::CkptWork& r, const proto::Envelope&, std::string*) -> Result<proto::CkptWorkReply> {
          MutexLock lock(&mu_);
          asks_.push_back(r);
          if (!fail_with_.ok()) return fail_with_;
          return work_;
        });
    server_.Handle<proto::CkptDrained>(
        [this](const proto::CkptDrained& r, const proto::Envelope&, std::string*) -> Result<proto::CkptDrainedReply> {
          MutexLock lock(&mu_);
          drained_.push_back(r);
          if (r.ok && !hand_out_again_) {
            std::erase_if(work_.drain, [&](const proto::CkptDrainTask& t) { return t.entry.id == r.id; });
          }
          return proto::CkptDrainedReply{.level = uint8_t(r.ok ? proto::CkptLevel::kP : proto::CkptLevel::kR)};
        });
    EXPECT_TRUE(server_.Start().ok());
  }
  const std::string& endpoint() const { return server_.bound_endpoint(); }
  void Set(proto::CkptWorkReply w) {
    MutexLock lock(&mu_);
    work_ = std::move(w);
  }
  void Fail(Status s) {
    MutexLock lock(&mu_);
    fail_with_ = std::move(s);
  }
  // Hands out a task drained ok again: a coordinator that never finds the
  // uploads on its origin (a drain loop).
  void HandOutAgain() {
    MutexLock lock(&mu_);
    hand_out_again_ = true;
  }
  std::vector<proto::CkptDrained> drained() {
    MutexLock lock(&mu_);
    return drained_;
  }
  std::vector<proto::CkptWork> asks() {
    MutexLock lock(&mu_);
    return asks_;
  }

 private:
  proto::RpcServer server_;
  Mutex mu_;
  proto::CkptWorkReply work_ GUARDED_BY(mu_);
  Status fail_with_ GUARDED_BY(mu_);
  bool hand_out_again_ GUARDED_BY(mu_) = false;
  std::vector<proto::CkptDrained> drained_ GUARDED_BY(mu_);
  std::vector<proto::CkptWork> asks_ GUARDED_BY(mu_);
};

class DrainerTest : public ::testing::Test {
 protected:
  DrainerTest()
      : log_(spdlog::null_logger_mt("drainer-test-" + std::to_string(++count_))),
        coord_(zmq_, log_),
        peer_server_({.endpoint = "tcp://127.0.0.1:0", .name = "peer", .logger = log_, .context = &zmq_}),
        pool_(zmq_) {}

  void SetUp() override {
    // As OpenCkptOrigin does: the uploads go to the staging directory.
    ASSERT_TRUE(origin_->MakeDirs(kCkptStagingDir).ok());
    local_ = OpenStore("local");
    peer_ = OpenStore("peer");
    ServeCkptChunks(peer_server_, peer_.get());
    ASSERT_TRUE(peer_server_.Start().ok());
    drainer_ = MakeDrainer(coord_.endpoint());
  }

  std::unique_ptr<ReplicaStore> OpenStore(const std::string& name) {
    auto s = ReplicaStore::Open({.dir = JoinPath(tmp_.Sub(name), "ckpt"), .logger = log_});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }

  std::unique_ptr<Drainer> MakeDrainer(const std::string& coordinator,
                                       std::chrono::milliseconds poll_interval = 500ms,
                                       std::chrono::milliseconds backoff_min = 20ms,
                                       std::chrono::milliseconds backoff_max = 40ms, int upload_streams = 2) {
    return std::make_unique<Drainer>(
        Drainer::Options{.node = "self",
                         .coordinator = coordinator,
                         .origin_source = "mem://ckpt",
                         .open_origin = [this](const std::string&) -> Result<std::unique_ptr<CkptOrigin>> {
                           ++opens_;
                           // The first open hands the origin over; further
                           // ones (more upload streams) get connections to it.
                           if (unopened_origin_ == nullptr) return origin_->Connection();
                           return std::unique_ptr<CkptOrigin>(std::move(unopened_origin_));
                         },
                         .resolve = [this](const std::string& n) {
                           return n == "peer" ? peer_server_.bound_endpoint() : std::string();
                         },
                         .peers = &pool_,
                         .poll_interval = poll_interval,
                         .upload_streams = upload_streams,
                         .backoff_min = backoff_min,
                         .backoff_max = backoff_max,
                         .rpc_timeout = 1000ms,
                         .peer_timeout = 2000ms,
                         .logger = log_,
                         .context = &zmq_,
                         .clock = &clock_},
        local_.get());
  }

  // A committed generation of `bytes` in chunks of `cs`, written by `writer`
  // and replicated to `replica` (if any).
  proto::CkptEntry Entry(uint64_t id, uint64_t gen, const std::string& bytes, uint64_t cs, std::string writer,
                         std::string replica = "") {
    proto::CkptEntry e{.path = "job/ckpt-" + std::to_string(id), .id = id, .gen = gen, .size = bytes.size(),
                       .level = uint8_t(proto::CkptLevel::kR), .chunk_size = cs, .writer = std::move(writer)};
    for (uint64_t off = 0; off < bytes.size(); off += cs) {
      e.checksums.push_back(Sum(std::string_view(bytes).substr(off, cs)));
      e.replicas.push_back(replica.empty() ? std::vector<std::string>{} : std::vector<std::string>{replica});
    }
    return e;
  }
  static std::string Tmp(const proto::CkptEntry& e) {
    return ".hoard-staging/" + std::to_string(e.id) + "-" + std::to_string(e.gen);
  }
  void PutChunks(ReplicaStore* s, const proto::CkptEntry& e, const std::string& bytes) {
    for (uint32_t i = 0; i < e.checksums.size(); ++i) {
      ASSERT_TRUE(s->Put(e.id, e.gen, i, e.checksums[i], std::string_view(bytes).substr(i * e.chunk_size,
                                                                                          e.chunk_size)).ok());
    }
  }
  // The bytes of the complete file at `path`; nullopt when nothing is there
  // ("<not a complete file>" for a partial file or a directory).
  std::optional<std::string> Uploaded(const std::string& path) {
    const std::map<std::string, std::string> files = origin_->Files();
    auto it = files.find(path);
    if (it != files.end()) return it->second;
    if (origin_->Exists(path)) return "<not a complete file>";
    return std::nullopt;
  }
  // True if the last writer of `path` closed it (Files() lists only those).
  bool Closed(const std::string& path) { return origin_->Files().contains(path); }
  // Makes a file look written an hour ago (older than eviction's grace).
  static void Age(const std::string& path) {
    struct timespec t[2];
    ::clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= 3600;
    t[1] = t[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, 0), 0) << path;
  }

  testing::TempDir tmp_;
  FakeClock clock_;  // outlives the drainer
  zmq::context_t zmq_;
  std::shared_ptr<spdlog::logger> log_;
  FakeCoordinator coord_;
  proto::RpcServer peer_server_;
  proto::ClientPool pool_;
  // The checkpoint origin. A drainer opens its origin once and keeps it: the
  // first open hands this one over; origin_ stays valid while that drainer
  // lives (to the end of the test).
  std::unique_ptr<MemCkptOrigin> unopened_origin_ = std::make_unique<MemCkptOrigin>("mem://ckpt");
  MemCkptOrigin* const origin_ = unopened_origin_.get();
  std::atomic<int> opens_{0};
  std::unique_ptr<ReplicaStore> local_, peer_;
  std::unique_ptr<Drainer> drainer_;
  static inline int count_ = 0;
};

TEST_F(DrainerTest, UploadsTheWholeFileCopyToTheTmpNameAndReportsOk) {
  const std::string bytes = PseudoRandomBytes(2500, 1);
  proto::CkptEntry e = Entry(11, 3, bytes, 1000, "self");
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("local"), 11), bytes).ok());
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {11}});
  int drained = 0;
  Status s = drainer_->RunOnce(&drained);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(drained, 1);
  EXPECT_TRUE(Uploaded(Tmp(e)) == bytes) << "the upload differs from the committed bytes";
  EXPECT_TRUE(Closed(Tmp(e)));
  ASSERT_EQ(coord_.drained().size(), 1u);
  EXPECT_TRUE(coord_.drained()[0].ok);
  EXPECT_EQ(coord_.drained()[0].id, 11u);
  EXPECT_EQ(coord_.drained()[0].gen, 3u);
  EXPECT_EQ(coord_.drained()[0].node, "self");
  EXPECT_EQ(drainer_->counters().drained_bytes.load(), 2500u);
  EXPECT_EQ(drainer_->counters().drained_files.load(), 1u);
  EXPECT_EQ(opens_.load(), 1);
}

// The coordinator's drain task names the upload's path: a hostile one (from a
// compromised or buggy coordinator) is refused, reported not ok, and nothing
// is written anywhere in the origin.
TEST_F(DrainerTest, RefusesAHostileUploadPath) {
  const std::string bytes = PseudoRandomBytes(1500, 9);
  proto::CkptEntry e = Entry(14, 1, bytes, 1000, "self");
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("local"), 14), bytes).ok());
  for (const std::string& bad : {std::string(".."), std::string("../escape"), std::string(".hoard-staging/../../x"),
                                 std::string("/etc/escape"), std::string("a\0b", 3), std::string("")}) {
    coord_.Set({.drain = {{.entry = e, .tmp_path = bad}}, .keep_files = {14}});
    (void)drainer_->RunOnce();  // the refusal is reported to the coordinator, checked below
    EXPECT_TRUE(origin_->Files().empty()) << "uploaded to '" << bad << "'";
  }
  ASSERT_FALSE(coord_.drained().empty());
  for (const auto& d : coord_.drained()) {
    EXPECT_FALSE(d.ok);
    EXPECT_NE(d.error.find("malformed drain task"), std::string::npos) << d.error;
  }
}

TEST_F(DrainerTest, FetchesChunksItLacksFromTheirHolders) {
  const std::string bytes = PseudoRandomBytes(3 * 4096 + 10, 2);
  proto::CkptEntry e = Entry(12, 1, bytes, 4096, "peer");
  PutChunks(peer_.get(), e, bytes);  // stands for the writer's copy
  // Chunk 1 is also here: taken locally, the others from the peer.
  ASSERT_TRUE(local_->Put(12, 1, 1, e.checksums[1], bytes.substr(4096, 4096)).ok());
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {12}});
  Status s = drainer_->RunOnce();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Uploaded(Tmp(e)) == bytes) << "the upload differs from the committed bytes";
  ASSERT_EQ(coord_.drained().size(), 1u);
  EXPECT_TRUE(coord_.drained()[0].ok) << coord_.drained()[0].error;
}

TEST_F(DrainerTest, FailedUploadIsReportedNotOkThenRetriedOverTheSameName) {
  const std::string bytes = PseudoRandomBytes(5000, 3);
  proto::CkptEntry e = Entry(13, 2, bytes, 2048, "peer");
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {13}});
  origin_->FailNext(CkptOp::kCreate, Status::Unavailable("injected: origin unreachable"));
  // 1: the origin is unreachable.
  EXPECT_EQ(drainer_->RunOnce().code(), Code::kUnavailable);
  // 2: no holder has the chunks: nothing partial stays on the origin.
  EXPECT_EQ(drainer_->RunOnce().code(), Code::kNotFound);
  EXPECT_FALSE(Uploaded(Tmp(e)).has_value());
  // 3: the peer has them now.
  PutChunks(peer_.get(), e, bytes);
  Status s = drainer_->RunOnce();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Uploaded(Tmp(e)) == bytes) << "the upload differs from the committed bytes";
  std::vector<proto::CkptDrained> d = coord_.drained();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_FALSE(d[0].ok);
  EXPECT_NE(d[0].error.find("unreachable"), std::string::npos) << d[0].error;
  EXPECT_FALSE(d[1].ok);
  EXPECT_NE(d[1].error.find("no reachable holder"), std::string::npos) << d[1].error;
  EXPECT_TRUE(d[2].ok);
  EXPECT_EQ(drainer_->counters().failures.load(), 2u);
  EXPECT_EQ(drainer_->counters().drained_files.load(), 1u);
}

// Issue 28: the coordinator tells the origin's failures (which `hoard status`
// flags) from chunks no holder could give (the file's own trouble).
TEST_F(DrainerTest, AFailedUploadSaysWhetherTheOriginFailed) {
  const std::string bytes = PseudoRandomBytes(5000, 10);
  proto::CkptEntry full = Entry(16, 1, bytes, 2048, "self");
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("local"), 16), bytes).ok());
  origin_->SetCapacity(1000);  // the origin is full
  coord_.Set({.drain = {{.entry = full, .tmp_path = Tmp(full)}}, .keep_files = {16}});
  EXPECT_EQ(drainer_->RunOnce().code(), Code::kNoSpace);
  origin_->SetCapacity(1 << 20);
  proto::CkptEntry nowhere = Entry(17, 1, PseudoRandomBytes(3000, 11), 1000, "peer");  // no holder has it
  coord_.Set({.drain = {{.entry = nowhere, .tmp_path = Tmp(nowhere)}}, .keep_files = {17}});
  EXPECT_EQ(drainer_->RunOnce().code(), Code::kNotFound);
  std::vector<proto::CkptDrained> d = coord_.drained();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_FALSE(d[0].ok);
  EXPECT_TRUE(d[0].at_origin);
  EXPECT_TRUE(d[0].error.starts_with("NoSpace:")) << d[0].error;
  EXPECT_FALSE(d[1].ok);
  EXPECT_FALSE(d[1].at_origin) << d[1].error;
}

// Issue 28: a node asked to upload a generation it already uploaded three
// times (the coordinator keeps not finding it) counts it and says so in its
// log, once a minute at most.
TEST_F(DrainerTest, UploadingTheSameGenerationAgainAndAgainIsCountedAndLogged) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100);
  log_ = std::make_shared<spdlog::logger>("drainer-loop-" + std::to_string(++count_), sink);
  drainer_ = MakeDrainer(coord_.endpoint());
  const std::string bytes = PseudoRandomBytes(1500, 12);
  proto::CkptEntry e = Entry(18, 5, bytes, 1000, "self");
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("local"), 18), bytes).ok());
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {18}});
  coord_.HandOutAgain();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(drainer_->RunOnce().ok());
  EXPECT_EQ(coord_.drained().size(), 6u);
  EXPECT_EQ(drainer_->counters().repeated_uploads.load(), 3u) << "the 4th, 5th and 6th uploads";
  auto warnings = [&] {
    int n = 0;
    for (const std::string& line : sink->last_formatted()) {
      n += line.find("[warning]") != std::string::npos && line.find("times now") != std::string::npos ? 1 : 0;
    }
    return n;
  };
  EXPECT_EQ(warnings(), 1);
  clock_.Advance(std::chrono::seconds(61));
  ASSERT_TRUE(drainer_->RunOnce().ok());
  EXPECT_EQ(warnings(), 2) << "a minute later it is said again";
}

// Issue 28: after a failure, a retry never waits more than 10 s by default,
// so a freed origin gets the drain within 10 s.
TEST(DrainerDefaultsTest, RetriesAreNeverMoreThanTenSecondsApart) {
  EXPECT_LE(Drainer::Options{}.backoff_max, std::chrono::seconds(10));
}

TEST_F(DrainerTest, WrongBytesFromAHolderAreNeverUploaded) {
  const std::string bytes = PseudoRandomBytes(3000, 4);
  proto::CkptEntry e = Entry(14, 1, bytes, 3000, "peer");
  // The peer's whole-file copy was rewritten since the commit.
  std::string newer = bytes;
  newer[7] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("peer"), 14), newer).ok());
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {14}});
  EXPECT_EQ(drainer_->RunOnce().code(), Code::kNotFound);
  EXPECT_FALSE(Uploaded(Tmp(e)).has_value());
  ASSERT_EQ(coord_.drained().size(), 1u);
  EXPECT_FALSE(coord_.drained()[0].ok);
}

// Several files drain over parallel streams, each on its own origin
// connection, and each is reported as it ends; a second round (every file
// P) opens nothing new.
TEST_F(DrainerTest, FilesDrainOverParallelStreams) {
  origin_->SetDelay(5ms);  // every origin call takes a while, as over a network
  proto::CkptWorkReply work;
  std::map<std::string, std::string> want;
  for (uint64_t id = 21; id <= 24; ++id) {
    const std::string bytes = PseudoRandomBytes(4 * 1000 + id, int(id));
    proto::CkptEntry e = Entry(id, 1, bytes, 1000, "self");
    ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("local"), id), bytes).ok());
    work.drain.push_back({.entry = e, .tmp_path = Tmp(e)});
    work.keep_files.push_back(id);
    want[Tmp(e)] = bytes;
  }
  coord_.Set(work);
  int drained = 0;
  ASSERT_TRUE(drainer_->RunOnce(&drained).ok());
  EXPECT_EQ(drained, 4);
  for (const auto& [path, bytes] : want) EXPECT_TRUE(Uploaded(path) == bytes) << path;
  EXPECT_EQ(opens_.load(), 2) << "one origin connection per stream";
  EXPECT_EQ(origin_->counters().max_concurrent_calls, 2u) << "two uploads at a time";
  std::vector<proto::CkptDrained> d = coord_.drained();
  ASSERT_EQ(d.size(), 4u);
  for (const auto& r : d) EXPECT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(drainer_->RunOnce().ok());
  EXPECT_EQ(opens_.load(), 2);
}

// A failed upload ends the round: no stream takes a new task after it.
TEST_F(DrainerTest, AFailedUploadStopsTheOtherStreamsTakingTasks) {
  proto::CkptWorkReply work;
  for (uint64_t id = 31; id <= 36; ++id) {
    proto::CkptEntry e = Entry(id, 1, PseudoRandomBytes(3000, int(id)), 1000, "peer");  // nowhere: no holder has it
    work.drain.push_back({.entry = e, .tmp_path = Tmp(e)});
    work.keep_files.push_back(id);
  }
  coord_.Set(work);
  EXPECT_EQ(drainer_->RunOnce().code(), Code::kNotFound);
  // Each stream ends after its first failure: at most one task each.
  EXPECT_LE(coord_.drained().size(), 2u);
  EXPECT_GE(coord_.drained().size(), 1u);
  for (const auto& r : coord_.drained()) EXPECT_FALSE(r.ok);
}

TEST_F(DrainerTest, UploadIsPacedToTheCoordinatorsRate) {
  const std::string bytes = PseudoRandomBytes(4 << 20, 5);
  proto::CkptEntry e = Entry(15, 1, bytes, 1 << 20, "self");
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.Sub("local"), 15), bytes).ok());
  // 2 MiB/s with a 1 MiB burst: 4 MiB take about 1.5 s.
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {15}, .max_drain_bytes_per_s = 2 << 20});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(drainer_->RunOnce().ok());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 1200ms);
  EXPECT_LT(took, 5000ms);
  EXPECT_TRUE(Uploaded(Tmp(e)) == bytes) << "the upload differs from the committed bytes";
}

TEST_F(DrainerTest, EvictsOnlyOnAWellFormedAnswer) {
  const std::string b = PseudoRandomBytes(100, 6);
  const std::string file = ReplicaStore::WholeFilePath(tmp_.Sub("local"), 21);
  ASSERT_TRUE(local_->Put(21, 1, 0, Sum(b), b).ok());
  ASSERT_TRUE(WriteFileAtomic(file, b).ok());
  Age(local_->ChunkPath(21, 1, 0, Sum(b)));
  Age(file);
  auto held = [&] { return local_->List().chunks.size() + local_->List().files.size(); };

  // No coordinator at all.
  std::unique_ptr<Drainer> orphan = MakeDrainer("tcp://127.0.0.1:1");
  EXPECT_EQ(orphan->RunOnce().code(), Code::kUnavailable);
  EXPECT_EQ(held(), 2u);
  // A coordinator that answers with an error.
  coord_.Fail(Status::Unavailable("namespace still loading"));
  EXPECT_FALSE(drainer_->RunOnce().ok());
  EXPECT_EQ(held(), 2u);
  coord_.Fail(Status::Ok());
  // A reply that contradicts itself: it drains a file it does not keep.
  proto::CkptEntry e = Entry(22, 1, b, 100, "peer");
  PutChunks(peer_.get(), e, b);
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {}});
  ASSERT_TRUE(drainer_->RunOnce().ok());
  EXPECT_EQ(held(), 2u);
  // A well-formed answer without file 21: its copies go.
  coord_.Set({.keep_files = {}});
  ASSERT_TRUE(drainer_->RunOnce().ok());
  EXPECT_EQ(held(), 0u);
  EXPECT_EQ(drainer_->counters().evicted_files.load(), 2u);
}

TEST_F(DrainerTest, RebuildsListedReplicasFromPeersOnItsFirstRound) {
  const std::string bytes = PseudoRandomBytes(2000, 7);
  proto::CkptEntry e = Entry(31, 4, bytes, 1000, "peer");
  PutChunks(peer_.get(), e, bytes);
  ASSERT_TRUE(local_->Put(31, 4, 0, e.checksums[0], bytes.substr(0, 1000)).ok());  // survived
  proto::CkptWorkReply w{.keep_files = {31}};
  for (uint32_t i = 0; i < 2; ++i) {
    w.rebuild.push_back({.id = 31, .gen = 4, .index = i, .checksum = e.checksums[i], .length = 1000,
                         .chunk_size = 1000, .holders = {"peer"}});
  }
  coord_.Set(w);
  ASSERT_TRUE(drainer_->RunOnce().ok());
  ASSERT_TRUE(drainer_->RunOnce().ok());
  std::vector<proto::CkptWork> asks = coord_.asks();
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_TRUE(asks[0].rebuild);
  EXPECT_FALSE(asks[1].rebuild) << "the list is asked for at start, then every rebuild_interval";
  EXPECT_EQ(drainer_->counters().rebuilt_chunks.load(), 1u);
  Result<std::string> r = local_->Read(31, 4, 1, e.checksums[1], 1000, 1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, bytes.substr(1000));
}

TEST_F(DrainerTest, ThreadDrainsInTheBackgroundAndStops) {
  const std::string bytes = PseudoRandomBytes(1500, 8);
  proto::CkptEntry e = Entry(41, 1, bytes, 1000, "peer");
  PutChunks(peer_.get(), e, bytes);
  coord_.Set({.drain = {{.entry = e, .tmp_path = Tmp(e)}}, .keep_files = {41}});
  drainer_->Start();
  EXPECT_TRUE(testing::Eventually([&] { return drainer_->counters().drained_files.load() >= 1; }));
  // It keeps asking for work, every poll_interval.
  for (uint64_t waits = 2; waits <= 3; ++waits) {
    ASSERT_TRUE(testing::Eventually([&] { return drainer_->TEST_waits() >= waits; }));
    EXPECT_EQ(drainer_->TEST_next_round(), clock_.Now() + 500ms);
    clock_.Advance(500ms);
  }
  EXPECT_TRUE(testing::Eventually([&] { return coord_.asks().size() >= 4; }));
  drainer_->Stop();
  EXPECT_TRUE(Uploaded(Tmp(e)) == bytes) << "the upload differs from the committed bytes";
  EXPECT_EQ(drainer_->counters().drained_files.load(), 1u);
}

TEST_F(DrainerTest, BacksOffWhileTheCoordinatorFails) {
  coord_.Fail(Status::Unavailable("down for maintenance"));
  // Polls every 10 ms when all is well; after failures, 200 ms then 400 ms.
  drainer_ = MakeDrainer(coord_.endpoint(), 10ms, 200ms, 400ms);
  drainer_->Start();
  // Each failed round waits longer, up to backoff_max.
  uint64_t waits = 0;
  for (auto backoff : {200ms, 400ms, 400ms}) {
    ASSERT_TRUE(testing::Eventually([&] { return drainer_->TEST_waits() > waits; }));
    waits = drainer_->TEST_waits();
    EXPECT_EQ(coord_.asks().size(), waits) << "one round per wait";
    EXPECT_EQ(drainer_->TEST_next_round(), clock_.Now() + backoff);
    // Answers again from the fourth round on: back to polling.
    if (waits == 3) coord_.Fail(Status::Ok());
    clock_.Advance(backoff);
  }
  ASSERT_TRUE(testing::Eventually([&] { return drainer_->TEST_waits() > waits; }));
  EXPECT_EQ(drainer_->TEST_next_round(), clock_.Now() + 10ms);
  drainer_->Stop();
}

}  // namespace
}  // namespace hoard
