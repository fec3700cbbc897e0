#include "checkpoint/ckpt_drain_queue.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using std::chrono::seconds;

// A committed, undrained file written by `writer`, chunk 0 also on `replica`.
CkptNode Committed(uint64_t id, uint64_t commit_seq, const std::string& writer, const std::string& replica = "") {
  CkptNode n;
  n.id = id;
  n.name = "f" + std::to_string(id);
  n.gen = 1;
  n.commit_seq = commit_seq;
  n.writer = writer;
  n.replicas = {replica.empty() ? std::vector<std::string>{} : std::vector<std::string>{replica}};
  return n;
}

class CkptDrainQueueTest : public ::testing::Test {
 protected:
  CkptDrainQueueTest() : q_(Options(), t0_, /*opened_unix_ms=*/1000) {}

  static CkptDrainQueue::Options Options() {
    return {.max_tasks_per_node = 2, .lease = seconds(30), .writing_hold = seconds(5),
            .drain_deadline = seconds(60), .drain_max_bytes_per_s = 0, .drain_share = 0.25,
            .drain_min_bytes_per_s = 1000};
  }

  void Add(const CkptNode& n) {
    ns_.Put(n);
    q_.Index(n, true);
  }

  std::vector<uint64_t> Take(const std::string& node, std::chrono::steady_clock::time_point now,
                             const std::set<std::string>& up = {"a", "b"}) {
    std::vector<uint64_t> ids;
    for (const CkptNode* n : q_.Take(ns_, node, up, now)) ids.push_back(n->id);
    return ids;
  }

  const std::chrono::steady_clock::time_point t0_{seconds(100)};
  CkptNamespace ns_;
  CkptDrainQueue q_;
};

TEST_F(CkptDrainQueueTest, IndexesOnlyUndrainedFiles) {
  Add(Committed(1, 5, "a"));
  CkptNode published = Committed(2, 6, "a");
  published.published_gen = 1;
  Add(published);
  CkptNode uploaded = Committed(3, 7, "a");
  uploaded.uploaded_gen = 1;
  Add(uploaded);
  CkptNode never = Committed(4, 0, "a");
  never.gen = 0;
  Add(never);
  EXPECT_EQ(q_.undrained(), (std::set<std::pair<uint64_t, uint64_t>>{{5, 1}}));
  q_.Index(*ns_.Find(1), false);
  EXPECT_TRUE(q_.undrained().empty());
}

TEST_F(CkptDrainQueueTest, HandsOutFlushedFirstThenCommitOrderToTheDrainer) {
  Add(Committed(1, 1, "a"));
  Add(Committed(2, 2, "a"));
  Add(Committed(3, 3, "a"));
  Add(Committed(4, 4, "gone", "b"));  // writer down: the first up holder drains it
  q_.Flush(3);
  EXPECT_EQ(Take("a", t0_ + seconds(30)), (std::vector<uint64_t>{3, 1}));  // at most 2
  EXPECT_EQ(Take("b", t0_ + seconds(30)), (std::vector<uint64_t>{4}));
  EXPECT_EQ(CkptDrainQueue::Drainer(*ns_.Find(4), {"c"}), std::nullopt);
}

TEST_F(CkptDrainQueueTest, LeasesEndWhenTheNodeAsksAgainOrRunOut) {
  Add(Committed(1, 1, "a", "b"));
  const auto now = t0_ + seconds(30);
  EXPECT_EQ(Take("a", now), (std::vector<uint64_t>{1}));
  // Node a asks again: it is not uploading what it did not report.
  EXPECT_EQ(Take("a", now), (std::vector<uint64_t>{1}));
  // Node a goes down: b drains the file, but not while a's lease runs.
  EXPECT_TRUE(Take("b", now, {"b"}).empty());
  EXPECT_EQ(Take("b", now + seconds(30), {"b"}), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(Take("a", now + seconds(30)).empty());  // a is back: leased to b
  q_.EndLease(1, 1);
  q_.EndLease(1, 1);
  EXPECT_EQ(Take("a", now + seconds(1)), (std::vector<uint64_t>{1}));
  q_.Committed(1, /*writing=*/false, 0, now);  // a new generation: its old lease is moot
  EXPECT_EQ(Take("a", now + seconds(1)), (std::vector<uint64_t>{1}));
}

TEST_F(CkptDrainQueueTest, FilesBeingWrittenWait) {
  Add(Committed(1, 1, "a"));
  Add(Committed(2, 2, "a"));
  const auto now = t0_ + seconds(30);
  q_.SetWriting({1}, 0, {});
  q_.Committed(2, /*writing=*/true, /*mount=*/7, now);
  EXPECT_TRUE(Take("a", now).empty());
  // Mount 7 reports without file 2: drainable; file 1 still written.
  q_.SetWriting({1}, 7, {});
  EXPECT_EQ(Take("a", now), (std::vector<uint64_t>{2}));
  q_.SetWriting({}, 0, {});
  EXPECT_EQ(Take("a", now + seconds(1)), (std::vector<uint64_t>{1, 2}));
}

TEST_F(CkptDrainQueueTest, AWritingCommitOfThePreviousRunWaitsForTheMountsToReport) {
  CkptNode n = Committed(1, 1, "a");
  n.committed_writing = true;
  n.committed_unix_ms = 500;  // before this run opened (1000)
  Add(n);
  EXPECT_TRUE(Take("a", t0_ + seconds(1)).empty());
  EXPECT_EQ(Take("a", t0_ + seconds(5)), (std::vector<uint64_t>{1}));
}

TEST_F(CkptDrainQueueTest, BudgetSharesTheOriginWithFillsUnlessSomethingWaits) {
  EXPECT_EQ(q_.Budget(ns_, 0, 0), 0u);            // no fills: unlimited
  EXPECT_EQ(q_.Budget(ns_, 30000, 0), 10000u);    // 30000 × 0.25 / 0.75
  EXPECT_EQ(q_.Budget(ns_, 300, 0), 1000u);       // never below the minimum
  CkptNode n = Committed(1, 1, "a");
  n.committed_unix_ms = 1000;
  Add(n);
  EXPECT_FALSE(q_.AnyOverdue(ns_, 61000));
  EXPECT_TRUE(q_.AnyOverdue(ns_, 61001));
  EXPECT_EQ(q_.Budget(ns_, 30000, 61001), 0u);    // overdue: the share is lifted
  q_.Flush(1);
  EXPECT_EQ(q_.Budget(ns_, 30000, 0), 0u);        // flushed: likewise
  q_.Published(1);
  EXPECT_EQ(q_.Budget(ns_, 30000, 0), 10000u);
}

}  // namespace
}  // namespace hoard
