#include "checkpoint/drain_health.h"

#include <cerrno>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

namespace hoard {
namespace {

class DrainHealthTest : public ::testing::Test {
 protected:
  // Lines logged at `level` that contain `text`.
  int Logged(const std::string& level, const std::string& text) {
    int n = 0;
    for (const std::string& line : sink_->last_formatted()) {
      n += line.find("[" + level + "]") != std::string::npos && line.find(text) != std::string::npos ? 1 : 0;
    }
    return n;
  }
  void Full(int64_t now_ms, const std::string& node = "n1", uint64_t id = 7) {
    health_.UploadFailed(id, 1, "job/a", node, Status::FromErrno(ENOSPC, "write '.hoard-staging/7-1-n1'").ToString(),
                         /*at_origin=*/true, now_ms);
  }

  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100);
  DrainHealth health_{std::make_shared<spdlog::logger>("drain-health-test", sink_)};
};

// The three an operator must tell apart, from what the origins return.
TEST_F(DrainHealthTest, ReasonsNameNoSpacePermissionAndUnreachable) {
  auto reason = [](const Status& s, bool at_origin = true) {
    return DrainHealth::Reason(s.code(), s.message(), at_origin);
  };
  EXPECT_EQ(reason(Status::FromErrno(ENOSPC, "write x")), "no_space");
  EXPECT_EQ(reason(Status::FromErrno(EDQUOT, "write x")), "no_space");
  EXPECT_EQ(reason(Status::FromErrno(EACCES, "create x")), "permission");
  EXPECT_EQ(reason(Status::FromErrno(EPERM, "rename x")), "permission");
  EXPECT_EQ(reason(Status::FromErrno(EROFS, "create x")), "permission");
  EXPECT_EQ(reason(Status::Unavailable("nfs://nfs1/ckpt: no answer within 10000 ms")), "unreachable");
  EXPECT_EQ(reason(Status::FromErrno(ENOENT, "create '.hoard-staging/x'")), "not_found");
  EXPECT_EQ(reason(Status::FromErrno(EIO, "fsync x")), "io_error");
  EXPECT_EQ(reason(Status::NotFound("chunk 0 ... is on no reachable holder"), /*at_origin=*/false), "chunks_missing");
}

TEST_F(DrainHealthTest, AFailingPartyIsLoggedWhenItStartsAndWhenItRecovers) {
  for (int i = 0; i < 10; ++i) Full(1'000 + i * 5'000);
  EXPECT_EQ(Logged("warning", "n1 cannot write to it (no_space)"), 1) << "once, not at every attempt";
  proto::CkptOriginHealth h = health_.Origin(50'000);
  EXPECT_TRUE(h.failing);
  EXPECT_EQ(h.since_unix_ms, 1'000);
  EXPECT_EQ(h.last_unix_ms, 46'000);
  EXPECT_EQ(h.code, uint8_t(Code::kNoSpace));
  // Another kind of failure is news.
  health_.UploadFailed(7, 1, "job/a", "n1", Status::Unavailable("timed out").ToString(), true, 51'000);
  EXPECT_EQ(Logged("warning", "n1 cannot write to it (unreachable)"), 1);
  EXPECT_EQ(health_.Origin(51'000).since_unix_ms, 1'000) << "still the same run";
  health_.UploadOk(8, 1, "job/b", "n1", 52'000);
  EXPECT_EQ(Logged("info", "n1 writes to it again"), 1);
  EXPECT_FALSE(health_.Origin(52'000).failing);
  EXPECT_NE(health_.FileError(7), nullptr) << "file 7 itself has not got through";
}

// A node that failed and then stopped trying (it went down) does not flag
// the origin for ever.
TEST_F(DrainHealthTest, AFailureNobodyRepeatsGoesStale) {
  Full(1'000, "n2");
  EXPECT_TRUE(health_.Origin(1'000 + DrainHealth::kStaleAfterMs).failing);
  EXPECT_FALSE(health_.Origin(1'001 + DrainHealth::kStaleAfterMs).failing);
}

TEST_F(DrainHealthTest, ThePublishersFailuresCountAsTheCoordinators) {
  health_.PublisherFailed(7, 1, "job/a", Status::FromErrno(EACCES, "rename x"), /*for_good=*/false, 1'000);
  proto::CkptOriginHealth h = health_.Origin(2'000);
  EXPECT_TRUE(h.failing);
  EXPECT_EQ(h.nodes, std::vector<std::string>{""});
  EXPECT_EQ(h.reason, "permission");
  ASSERT_NE(health_.FileError(7), nullptr);
  EXPECT_EQ(health_.FileError(7)->node, "");
  health_.PublisherOk(3'000);
  EXPECT_FALSE(health_.Origin(3'000).failing);
  health_.Forget(7);
  EXPECT_EQ(health_.FileError(7), nullptr);
}

}  // namespace
}  // namespace hoard
