#include "checkpoint/publisher.h"

#include <gtest/gtest.h>

#include "common/testing.h"

namespace hoard {
namespace {

using proto::CkptLevel;

// A minimal in-memory CkptOrigin (to be replaced by MemCkptOrigin): files
// and directories by path, every namespace call logged, and failures
// injectable for the next N calls.
class FakeCkptOrigin : public CkptOrigin {
 public:
  struct Writer : CkptWriter {
    FakeCkptOrigin* o;
    std::string path;
    Status WriteAt(uint64_t, const char* data, size_t len) override {
      std::lock_guard lock(o->mu);
      o->files[path].append(data, len);
      return Status::Ok();
    }
    Status Close() override { return Status::Ok(); }
  };

  const std::string& source() const override { return source_; }
  Result<std::unique_ptr<CkptWriter>> Create(std::string_view path) override {
    std::lock_guard lock(mu);
    files[std::string(path)].clear();
    auto w = std::make_unique<Writer>();
    w->o = this;
    w->path = path;
    return std::unique_ptr<CkptWriter>(std::move(w));
  }
  Status MakeDirs(std::string_view path) override {
    std::lock_guard lock(mu);
    HOARD_RETURN_IF_ERROR(Fail());
    log.push_back("mkdirs " + std::string(path));
    return Status::Ok();
  }
  Status Rename(std::string_view from, std::string_view to) override {
    std::lock_guard lock(mu);
    HOARD_RETURN_IF_ERROR(Fail());
    // Files only; a directory rename moves every file under it.
    std::map<std::string, std::string> moved;
    const std::string f(from), prefix = f + "/";
    for (auto it = files.begin(); it != files.end();) {
      if (it->first == f || it->first.starts_with(prefix)) {
        moved[std::string(to) + it->first.substr(f.size())] = it->second;
        it = files.erase(it);
      } else {
        ++it;
      }
    }
    if (moved.empty()) return Status::NotFound(f);
    files.merge(moved);
    for (auto& [p, data] : moved) files[p] = data;  // replace
    log.push_back("rename " + f + " " + std::string(to));
    return Status::Ok();
  }
  Status Unlink(std::string_view path) override {
    std::lock_guard lock(mu);
    HOARD_RETURN_IF_ERROR(Fail());
    if (files.erase(std::string(path)) == 0) return Status::NotFound(std::string(path));
    log.push_back("unlink " + std::string(path));
    return Status::Ok();
  }
  Status Rmdir(std::string_view path) override {
    std::lock_guard lock(mu);
    HOARD_RETURN_IF_ERROR(Fail());
    log.push_back("rmdir " + std::string(path));
    return Status::Ok();
  }
  Result<OriginEntry> Stat(std::string_view path) override {
    std::lock_guard lock(mu);
    HOARD_RETURN_IF_ERROR(Fail());
    auto it = files.find(std::string(path));
    if (it == files.end()) return Status::NotFound(std::string(path));
    return OriginEntry{.path = it->first, .size = it->second.size()};
  }
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override {
    return Status::InvalidArgument("the fake checkpoint origin does not serve reads");
  }
  Result<uint64_t> FreeBytes() override { return uint64_t{1} << 40; }

  std::mutex mu;
  std::map<std::string, std::string> files;
  std::vector<std::string> log;
  int fail_calls = 0;
  Code fail_code = Code::kUnavailable;

 private:
  Status Fail() {
    if (fail_calls == 0) return Status::Ok();
    --fail_calls;
    return Status(fail_code, "injected");
  }
  std::string source_ = "fake://";
};

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override { publisher_.reset(); }

  void Open() {
    publisher_.reset();
    table_.reset();
    auto t = CkptTable::Open({.dir = dir_.Sub("ckpt"), .logger = spdlog::default_logger()});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table_ = std::move(*t);
  }
  void Start() {
    publisher_ = std::make_unique<Publisher>(Publisher::Options{.table = table_.get(),
                                                                .origin = &origin_,
                                                                .logger = spdlog::default_logger(),
                                                                .min_backoff = std::chrono::milliseconds(1),
                                                                .max_backoff = std::chrono::milliseconds(20)});
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
  std::string OnOrigin(const std::string& path) {
    std::lock_guard lock(origin_.mu);
    auto it = origin_.files.find(path);
    return it == origin_.files.end() ? "<absent>" : it->second;
  }

  testing::TempDir dir_;
  FakeCkptOrigin origin_;
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
  std::lock_guard lock(origin_.mu);
  EXPECT_EQ(origin_.log.back(), "rename job job2");
}

TEST_F(PublisherTest, UnavailableOriginIsRetriedAndNothingIsLost) {
  ASSERT_TRUE(table_->Create({.path = "job", .is_dir = true}).ok());
  origin_.fail_calls = 7;
  origin_.fail_code = Code::kNoSpace;
  Start();
  WriteAndDrain("job/a", "A");
  WriteAndDrain("job/b", "B");
  ASSERT_TRUE(table_->Remove({.path = "job/a"}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(origin_.fail_calls, 0);
  EXPECT_EQ(OnOrigin("job/a"), "<absent>");
  EXPECT_EQ(OnOrigin("job/b"), "B");
  std::lock_guard lock(origin_.mu);
  // In queue order: a published, b published, a unlinked.
  std::vector<std::string> namespace_ops;
  for (const auto& l : origin_.log) {
    if (!l.starts_with("mkdirs")) namespace_ops.push_back(l);
  }
  ASSERT_EQ(namespace_ops.size(), 3u);
  EXPECT_TRUE(namespace_ops[0].ends_with(" job/a"));
  EXPECT_TRUE(namespace_ops[1].ends_with(" job/b"));
  EXPECT_EQ(namespace_ops[2], "unlink job/a");
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
  // The data is not uploaded yet: the marker must not be there.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(OnOrigin("job/step/.metadata"), "<absent>");
  auto w = origin_.Create(CkptTable::StagingPath(data->id, 1, "n1"));
  ASSERT_TRUE((*w)->WriteAt(0, "D", 1).ok());
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = data->id, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/step/__0_0.distcp"), "D");
  EXPECT_EQ(OnOrigin("job/step/.metadata"), "META");
  std::lock_guard lock(origin_.mu);
  EXPECT_EQ(origin_.log.back().substr(origin_.log.back().rfind(' ') + 1), "job/step/.metadata");
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
  {
    std::lock_guard lock(origin_.mu);
    origin_.files.clear();  // the upload vanished
  }
  ASSERT_TRUE(table_->Drained({.node = "n1", .id = id, .gen = 1, .ok = true}).ok());
  ASSERT_TRUE(publisher_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(OnOrigin("job/a"), "<absent>");
  auto work = table_->Work("n1", {"n1"});
  ASSERT_EQ(work.drain.size(), 1u);
  EXPECT_EQ(work.drain[0].entry.id, id);
}

}  // namespace
}  // namespace hoard
