// Progress (coordinator/progress.h) on its own: what reports add up to
// (status), fill rates, and when a dataset counts as settled.
#include "coordinator/progress.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "coordinator/coordinator_parts_test_util.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using parts_test::At;
using parts_test::FileChunks;
using parts_test::kChunk;
using parts_test::MakeDataset;
using parts_test::MakeReport;

spdlog::logger& NullLogger() {
  static std::shared_ptr<spdlog::logger> logger = spdlog::null_logger_mt("progress-test");
  return *logger;
}

// Files f0 (2 chunks) and f1 (1 chunk of kChunk bytes): 3 chunks; node "n1"
// owns f0's, "n2" f1's.
class ProgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = MakeDataset("ds", 42, 1, {2 * kChunk, kChunk});
    files_ = FileChunks(d_);
    ASSERT_EQ(files_.size(), 2u);
    ASSERT_EQ(files_[0].size(), 2u);
    ASSERT_EQ(files_[1].size(), 1u);
  }

  Progress::StatusInput Input(std::optional<proto::DatasetReport> r1, std::optional<proto::DatasetReport> r2,
                              bool n2_up = true) {
    Progress::StatusInput in{d_.meta, d_.manifest, kEpoch, 0, {}};
    in.nodes.push_back({"n1", true, true, std::move(r1)});
    in.nodes.push_back({"n2", n2_up, n2_up, std::move(r2)});
    return in;
  }

  static constexpr uint64_t kEpoch = 3;
  Catalogue::Dataset d_;
  std::vector<std::vector<uint64_t>> files_;
};

TEST_F(ProgressTest, WholeFilesCountOnlyWithEveryChunkCached) {
  const std::vector<uint64_t>& f0 = files_[0];
  const std::vector<uint64_t>& f1 = files_[1];
  proto::DatasetStatus st =
      Progress::Compute(Input(MakeReport(d_, kEpoch, f0, {f0[0]}), MakeReport(d_, kEpoch, f1, f1)), NullLogger());
  EXPECT_EQ(st.expected_bytes, 3 * kChunk);
  EXPECT_EQ(st.cached_bytes, 2 * kChunk);
  EXPECT_EQ(st.cached_chunks, 2u);
  EXPECT_EQ(st.files_cached, 1u);
  EXPECT_EQ(st.nodes_reporting, 2u);
  EXPECT_FALSE(st.complete);
  ASSERT_EQ(st.shares.size(), 2u);
  EXPECT_EQ(st.shares[0].node, "n1");

  st = Progress::Compute(Input(MakeReport(d_, kEpoch, f0, f0), MakeReport(d_, kEpoch, f1, f1)), NullLogger());
  EXPECT_EQ(st.files_cached, 2u);
  EXPECT_TRUE(st.complete);
  EXPECT_EQ(st.eta_seconds, 0);
}

TEST_F(ProgressTest, OnlyCurrentReportsOfUpNodesCount) {
  const std::vector<uint64_t>& f0 = files_[0];
  const std::vector<uint64_t>& f1 = files_[1];
  // n2 is down: its report does not count, and it is not an owner either.
  proto::DatasetStatus st =
      Progress::Compute(Input(MakeReport(d_, kEpoch, f0, f0), MakeReport(d_, kEpoch, f1, f1), false), NullLogger());
  EXPECT_EQ(st.nodes_reporting, 1u);
  EXPECT_EQ(st.cached_chunks, 2u);
  EXPECT_FALSE(st.shares[1].reported);
  // A report at another placement, or of another version, does not count.
  st = Progress::Compute(Input(MakeReport(d_, kEpoch - 1, f0, f0), MakeReport(d_, kEpoch, f1, f1)), NullLogger());
  EXPECT_EQ(st.nodes_reporting, 1u);
  EXPECT_FALSE(st.complete);
  proto::DatasetReport old = MakeReport(d_, kEpoch, f1, f1);
  old.version = 0;
  st = Progress::Compute(Input(MakeReport(d_, kEpoch, f0, f0), old), NullLogger());
  EXPECT_EQ(st.nodes_reporting, 1u);
  EXPECT_FALSE(st.complete);
  // No report at all.
  st = Progress::Compute(Input(std::nullopt, std::nullopt), NullLogger());
  EXPECT_EQ(st.nodes_reporting, 0u);
  EXPECT_EQ(st.files_cached, 0u);
}

// Right after a refresh, nodes still report on the old version: what they
// hold of the files the new version kept counts (at its new ordinals), what
// they hold of changed files does not, and the dataset is not complete.
TEST_F(ProgressTest, ReportsOnThePreviousVersionCountTheChunksItKept) {
  Catalogue::Dataset v2 = MakeDataset("ds", 42, 2, {kChunk, kChunk});  // f0 changed (1 chunk), f1 kept
  const ManifestDiff diff = DiffManifests(d_.manifest, v2.manifest);
  ASSERT_EQ(diff.files_changed, 1u);
  const std::vector<uint64_t>& f0 = files_[0];
  const std::vector<uint64_t>& f1 = files_[1];  // ordinal 2 in v1, 1 in v2
  Progress::StatusInput in{v2.meta, v2.manifest, kEpoch, 0, {}};
  in.nodes.push_back({"n1", true, true, MakeReport(d_, kEpoch, f0, f0)});
  in.nodes.push_back({"n2", true, true, MakeReport(d_, kEpoch, f1, f1)});
  // Without the kept runs (before the fix, or after a coordinator restart): 0.
  proto::DatasetStatus st = Progress::Compute(in, NullLogger());
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(st.files_cached, 0u);

  in.kept_from = 1;
  in.kept = std::make_shared<const std::vector<KeptRun>>(diff.kept);
  st = Progress::Compute(in, NullLogger());
  EXPECT_EQ(st.cached_bytes, kChunk);
  EXPECT_EQ(st.cached_chunks, 1u);
  EXPECT_EQ(st.files_cached, 1u);  // f1, whole
  EXPECT_FALSE(st.complete);       // f0's new bytes are not fetched yet
  EXPECT_EQ(st.nodes_reporting, 0u);
  EXPECT_FALSE(st.shares[1].reported);

  // A report on an older version still, or at another placement, counts nothing.
  in.kept_from = 7;
  EXPECT_EQ(Progress::Compute(in, NullLogger()).cached_bytes, 0u);
  in.kept_from = 1;
  in.nodes[1].report->placement_epoch = kEpoch - 1;
  EXPECT_EQ(Progress::Compute(in, NullLogger()).cached_bytes, 0u);
}

TEST_F(ProgressTest, EtaFromTheFillRate) {
  Progress::StatusInput in = Input(MakeReport(d_, kEpoch, files_[0], {}), MakeReport(d_, kEpoch, files_[1], {}));
  in.fill_rate = double(kChunk);  // one chunk a second
  proto::DatasetStatus st = Progress::Compute(in, NullLogger());
  EXPECT_EQ(st.fill_rate, double(kChunk));
  EXPECT_EQ(st.eta_seconds, 3);
}

TEST_F(ProgressTest, FillRatesCountGrowthOfOneVersionOnly) {
  Progress p;
  proto::DatasetReport r = MakeReport(d_, kEpoch, files_[0], {});
  p.Report("n1", {r}, At(0s));
  EXPECT_EQ(p.TotalFillRate(At(0s)), 0);
  r = MakeReport(d_, kEpoch, files_[0], files_[0]);
  p.Report("n1", {r}, At(1s));
  EXPECT_GT(p.TotalFillRate(At(1s)), 0);
  p.ForgetDataset(d_.meta.uid);
  EXPECT_EQ(p.TotalFillRate(At(1s)), 0);

  // A report on the next version starts afresh: no growth.
  Progress q;
  q.Report("n1", {MakeReport(d_, kEpoch, files_[0], {})}, At(0s));
  r = MakeReport(d_, kEpoch, files_[0], files_[0]);
  r.version = 2;
  q.Report("n1", {r}, At(1s));
  EXPECT_EQ(q.TotalFillRate(At(1s)), 0);
}

TEST_F(ProgressTest, ReportedUntilTheNodeIsForgotten) {
  Progress p;
  EXPECT_FALSE(p.HasReported("n1"));
  p.Report("n1", {}, At(0s));  // an empty report is a report
  EXPECT_TRUE(p.HasReported("n1"));
  p.ForgetNode("n1");
  EXPECT_FALSE(p.HasReported("n1"));
}

TEST_F(ProgressTest, SettledAfterADownTimeoutOfEveryOwnerHoldingAll) {
  Catalogue catalogue;
  catalogue.Put(d_);
  Membership members;
  members.Register({.name = "n1", .endpoint = "tcp://h:1"}, At(0s), 0);
  members.Register({.name = "n2", .endpoint = "tcp://h:2"}, At(0s), 0);
  members.Register({.name = "n3", .endpoint = "tcp://h:3"}, At(0s), 0);
  members.Find("n3")->info.draining = true;  // owns nothing: not asked
  Progress p;
  EXPECT_TRUE(p.SettledNow(catalogue, members, kEpoch).empty());
  p.Report("n1", {MakeReport(d_, kEpoch, files_[0], files_[0])}, At(0s));
  p.Report("n2", {MakeReport(d_, kEpoch, files_[1], {})}, At(0s));
  EXPECT_TRUE(p.SettledNow(catalogue, members, kEpoch).empty());
  p.Report("n2", {MakeReport(d_, kEpoch, files_[1], files_[1])}, At(1s));
  std::vector<proto::SettledDataset> now = p.SettledNow(catalogue, members, kEpoch);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].uid, d_.meta.uid);
  EXPECT_EQ(now[0].placement_epoch, kEpoch);

  // Nodes are told only after a whole down timeout.
  p.UpdateSettled(catalogue, members, kEpoch, At(1s), 5s);
  EXPECT_TRUE(p.settled().empty());
  p.UpdateSettled(catalogue, members, kEpoch, At(5s), 5s);
  EXPECT_TRUE(p.settled().empty());
  p.UpdateSettled(catalogue, members, kEpoch, At(6s), 5s);
  ASSERT_EQ(p.settled().size(), 1u);

  // A new placement unsettles it, and the wait starts again.
  p.UpdateSettled(catalogue, members, kEpoch + 1, At(7s), 5s);
  EXPECT_TRUE(p.settled().empty());
  p.Report("n1", {MakeReport(d_, kEpoch + 1, files_[0], files_[0])}, At(8s));
  p.Report("n2", {MakeReport(d_, kEpoch + 1, files_[1], files_[1])}, At(8s));
  p.UpdateSettled(catalogue, members, kEpoch + 1, At(8s), 5s);
  EXPECT_TRUE(p.settled().empty());
  p.UpdateSettled(catalogue, members, kEpoch + 1, At(13s), 5s);
  EXPECT_EQ(p.settled().size(), 1u);

  // An owner down but held keeps its share, not its say: the copies others
  // hold may be what its chunks are copied from if it goes out.
  bool placement_changed = true;
  ASSERT_EQ(members.MarkSilentDown(At(14s), 5s, 14, /*hold=*/true, &placement_changed).size(), 3u);
  ASSERT_FALSE(placement_changed);
  members.Register({.name = "n1", .endpoint = "tcp://h:1"}, At(14s), 14);
  EXPECT_TRUE(p.SettledNow(catalogue, members, kEpoch + 1).empty()) << "n2 is down";
  members.Register({.name = "n2", .endpoint = "tcp://h:2"}, At(14s), 14);
  EXPECT_EQ(p.SettledNow(catalogue, members, kEpoch + 1).size(), 1u) << "n3 owns nothing";

  // A node that forgets (restarts) unsettles it.
  p.ForgetNode("n2");
  EXPECT_TRUE(p.SettledNow(catalogue, members, kEpoch + 1).empty());
}

}  // namespace
}  // namespace hoard
