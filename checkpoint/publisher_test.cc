#include "checkpoint/publisher.h"

#include <cerrno>

#include <gtest/gtest.h>

#include "testing/mem_ckpt_origin.h"
#include "common/testing.h"

namespace hoard {
namespace {

using proto::CkptLevel;

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // As OpenCkptOrigin does: the uploads go to the staging directory.
    ASSERT_TRUE(origin_.MakeDirs(kCkptStagingDir).ok());
    Open();
  }
  void TearDown() override { publisher_.reset(); }

  void Open() {
    publisher_.reset();
    table_.reset();
    auto t = CkptTable::Open({.dir = dir_.Sub("ckpt"), .logger = spdlog::default_logger()});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table_ = std::move(*t);
  }
  void Start(int io_error_attempts = Publisher::Options{}.io_error_attempts) {
    publisher_ = std::make_unique<Publisher>(Publisher::Options{.table = table_.get(),
                                                                .origin = &origin_,
                                                                .logger = spdlog::default_logger(),
                                                                .min_backoff = std::chrono::milliseconds(1),
                                                                .max_backoff = std::chrono::milliseconds(20),
                                                                .io_error_attempts = io_error_attempts});
  }
  // Creates and commits `path`, uploads its bytes as a drainer would, and
  // reports the upload.
  uint64_t WriteAndDrain(const std::string& path, const std::string& bytes, bool report = true) {
    auto e = table_->Create({.path = path});
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_TRUE(table_->Commit({.id = e->id, .gen = 1, .size = bytes.size(), .chunk_size = 4096,
                                .checksums = {1}, .writer = "n1", .replicas_wanted = 1, .level = 1})
                    .ok());
    auto work = table_->Work("n1", {"n1"});
    for (const auto& task : work.drain) {
      if (task.entry.id != e->id) continue;
      auto w = origin_.Create(task.tmp_path);
      EXPECT_TRUE((*w)->WriteAt(0, bytes.data(), bytes.size()).ok());
      EXPECT_TRUE((*w)->Close().ok());
    }
    if (report) {
      EXPECT_TRUE(table_->Drained({.node = "n1", .id = e->id, .gen = 1, .ok = true}).ok());
    }
    return e->id;
  }
  // The bytes of the complete file at `path`, or "<absent>" when nothing is
  // there (something that is not a complete file: "<not a complete file>").
  std::string OnOrigin(const std::string& path) {
    const std::map<std::string, std::string> files = origin_.Files();
    auto it = files.find(path);
    if (it != files.end()) return it->second;
    return origin_.Exists(path) ? "<not a complete file>" : "<absent>";
  }

  testing::TempDir dir_;
  MemCkptOrigin origin_;
  std::unique_ptr<CkptTable> table_;
  std::unique_ptr<Publisher> publisher_;
};

TEST_F(PublisherTest, PublishesThenMirrorsRenameInOrder) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  Start();
  const uint64_t id = WriteAndDrain("job/a.pt", "bytes");
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/a.pt"), "bytes");
  EXPECT_EQ(OnOrigin(CkptTable::StagingPath(id, 1, "n1")), "<absent>");
  EXPECT_EQ(table_->Lookup("job/a.pt")->level, uint8_t(CkptLevel::kP));
  EXPECT_GT(table_->Lookup("job/a.pt")->drained_unix_ms, 0);
  ASSERT_TRUE(table_->Rename({.from = "job", .to = "job2"}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job2/a.pt"), "bytes");
  EXPECT_EQ(OnOrigin("job/a.pt"), "<absent>");
  EXPECT_EQ(origin_.NamespaceLog().back(), "rename job job2");
}

TEST_F(PublisherTest, UnavailableOriginIsRetriedAndNothingIsLost) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  // Uploaded first, without a report: the faults below (of any origin call)
  // are then all met by the publisher, not by this test's uploads.
  const uint64_t a = WriteAndDrain("job/a", "A", /*report=*/false);
  const uint64_t b = WriteAndDrain("job/b", "B", /*report=*/false);
  origin_.FailNext(CkptOp::kAny, Status::NoSpace("injected"), 7);
  Start();
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = a, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = b, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(table_->Remove({.path = "job/a"}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(origin_.FaultsLeft(CkptOp::kAny), 0);
  EXPECT_EQ(OnOrigin("job/a"), "<absent>");
  EXPECT_EQ(OnOrigin("job/b"), "B");
  // In queue order: a published, b published, a unlinked.
  std::vector<std::string> namespace_ops;
  for (const auto& l : origin_.NamespaceLog()) {
    if (!l.starts_with("mkdirs")) namespace_ops.push_back(l);
  }
  ASSERT_EQ(namespace_ops.size(), 3u);
  EXPECT_TRUE(namespace_ops[0].ends_with(" job/a"));
  EXPECT_TRUE(namespace_ops[1].ends_with(" job/b"));
  EXPECT_EQ(namespace_ops[2], "unlink job/a");
}

// Issue 28: an origin that refuses (EACCES, EPERM, EROFS: kIoError with
// strerror's text) is the operator's to fix, like a full one: retried until
// fixed, never skipped for good after a few attempts (which left the file
// below P for ever).
TEST_F(PublisherTest, APermissionErrorIsRetriedUntilFixedNotSkipped) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  WriteAndDrain("job/a", "A");
  origin_.FailNext(CkptOp::kRename, Status::FromErrno(EACCES, "rename '.hoard-staging/2-1-n1' to 'job/a'"), 10);
  Start(/*io_error_attempts=*/3);
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(origin_.FaultsLeft(CkptOp::kRename), 0);
  EXPECT_EQ(OnOrigin("job/a"), "A");
  EXPECT_EQ(table_->Lookup("job/a")->level, uint8_t(CkptLevel::kP));
}

// Issue 28: while the publisher cannot write (here: mkdir on a full origin),
// the file and the origin show why and since when; it clears once it works.
TEST_F(PublisherTest, AFailingPublishIsShownUntilItWorks) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  const uint64_t id = WriteAndDrain("job/a", "A");
  origin_.FailNext(CkptOp::kMakeDirs, Status::FromErrno(ENOSPC, "mkdir 'job'"), 1'000'000);
  Start();
  ASSERT_TRUE(testing::Eventually([&] { return table_->OriginHealth().failing; }));
  const proto::CkptOriginHealth h = table_->OriginHealth();
  EXPECT_EQ(h.reason, "no_space");
  EXPECT_EQ(h.nodes, std::vector<std::string>{""}) << "the coordinator's publisher";
  auto s = table_->GetStatus({.job = "job"});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->drain_errors.size(), 1u);
  EXPECT_EQ(s->drain_errors[0].id, id);
  EXPECT_EQ(s->drain_errors[0].reason, "no_space");
  origin_.ClearFaults();  // space freed
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/a"), "A");
  EXPECT_FALSE(table_->OriginHealth().failing);
  EXPECT_TRUE(table_->GetStatus({.job = "job"})->drain_errors.empty());
}

// Issue 28: a freed origin must be used within 10 s, so no retry waits longer.
TEST(PublisherDefaultsTest, RetriesAreNeverMoreThanTenSecondsApart) {
  EXPECT_LE(Publisher::Options{}.max_backoff, std::chrono::seconds(10));
  // ... and a passing EIO (an NFS server restarting) still gets about 2 minutes.
  std::chrono::milliseconds patience{0};
  auto b = Publisher::Options{}.min_backoff;
  for (int i = 1; i < Publisher::Options{}.io_error_attempts; ++i) {
    patience += b;
    b = std::min(b * 2, Publisher::Options{}.max_backoff);
  }
  EXPECT_GE(patience, std::chrono::seconds(100));
}

TEST_F(PublisherTest, MarkerReachesTheOriginAfterTheData) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  ASSERT_TRUE(table_->Create({.path = "job/step", .is_dir = true}).ok());
  Start();
  auto data = table_->Create({.path = "job/step/__0_0.distcp"});
  ASSERT_TRUE(table_->Commit({.id = data->id, .gen = 1, .size = 1, .chunk_size = 4096, .checksums = {1},
                              .writer = "n1", .level = 1})
                  .ok());
  WriteAndDrain("job/step/.metadata", "META");
  // The data is not uploaded yet: the marker must not be there (the table
  // holds it back, so once the publisher has done all it was given, the
  // marker is still absent).
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/step/.metadata"), "<absent>");
  auto w = origin_.Create(CkptTable::StagingPath(data->id, 1, "n1"));
  ASSERT_TRUE((*w)->WriteAt(0, "D", 1).ok());
  ASSERT_TRUE((*w)->Close().ok());  // uploaded whole, as a drainer does
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = data->id, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/step/__0_0.distcp"), "D");
  EXPECT_EQ(OnOrigin("job/step/.metadata"), "META");
  const std::string last = origin_.NamespaceLog().back();
  EXPECT_EQ(last.substr(last.rfind(' ') + 1), "job/step/.metadata");
}

TEST_F(PublisherTest, QueueSurvivesARestart) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  // Uploaded and reported while no publisher runs; then the coordinator stops.
  WriteAndDrain("job/a", "A");
  ASSERT_TRUE(table_->Rename({.from = "job/a", .to = "job/b"}).ok());
  Open();
  Start();
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/b"), "A");
  EXPECT_EQ(table_->Lookup("job/b")->level, uint8_t(CkptLevel::kP));
}

TEST_F(PublisherTest, MissingStagingFileIsDrainedAgain) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  Start();
  const uint64_t id = WriteAndDrain("job/a", "A", /*report=*/false);
  ASSERT_TRUE(origin_.Unlink(CkptTable::StagingPath(id, 1, "n1")).ok());  // the upload vanished
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = id, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/a"), "<absent>");
  auto work = table_->Work("n1", {"n1"});
  ASSERT_EQ(work.drain.size(), 1u);
  EXPECT_EQ(work.drain[0].entry.id, id);
}

}  // namespace
}  // namespace hoard
