#include "common/work_queue.h"

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hoard {
namespace {

// A gate the handler blocks on, so that a test decides when items finish.
struct Gate {
  Mutex mu;
  CondVar cv;
  bool open GUARDED_BY(mu) = false;
  int waiting GUARDED_BY(mu) = 0;
  void Pass() {
    MutexLock l(&mu);
    ++waiting;
    cv.NotifyAll();
    while (!open) cv.Wait(&mu);
  }
  void WaitForWaiting(int n) {
    MutexLock l(&mu);
    while (waiting < n) cv.Wait(&mu);
  }
  void Open() {
    MutexLock l(&mu);
    open = true;
    cv.NotifyAll();
  }
};

TEST(WorkQueueTest, RunsEveryItemInOrderOnOneThread) {
  std::vector<int> seen;
  {
    WorkQueue<int> q({.name = "t", .threads = 1}, [&](int& i) { seen.push_back(i); });
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(q.Push(int{i}));
    q.WaitIdle();
    EXPECT_EQ(q.pending(), 0u);
  }
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
}

TEST(WorkQueueTest, RefusesPastItemAndCostBounds) {
  Gate gate;
  WorkQueue<int> q({.name = "t", .threads = 1, .max_items = 2, .max_cost = 100}, [&](int&) { gate.Pass(); });
  ASSERT_TRUE(q.Push(1, 10));
  gate.WaitForWaiting(1);  // item 1 runs: it no longer counts
  EXPECT_TRUE(q.Push(2, 60));
  EXPECT_FALSE(q.Push(3, 50)) << "60 + 50 > 100";
  EXPECT_TRUE(q.Push(4, 40));
  EXPECT_FALSE(q.Push(5, 0)) << "two items queued";
  EXPECT_EQ(q.queued(), 2u);
  EXPECT_EQ(q.queued_cost(), 100u);
  gate.Open();
  q.WaitIdle();
  // One item above the cost bound is taken when nothing is queued.
  EXPECT_TRUE(q.Push(6, 1000));
}

TEST(WorkQueueTest, StopDropsQueuedAndWaitsForRunning) {
  Gate gate;
  std::atomic<int> ran{0};
  std::vector<int> dropped;
  auto q = std::make_unique<WorkQueue<int>>(
      WorkQueue<int>::Options{.name = "t", .threads = 1, .on_drop = [&](int& i) { dropped.push_back(i); }},
      [&](int&) {
        gate.Pass();
        ran.fetch_add(1);
      });
  ASSERT_TRUE(q->Push(1));
  gate.WaitForWaiting(1);
  ASSERT_TRUE(q->Push(2));
  ASSERT_TRUE(q->Push(3));
  std::thread opener([&] {
    // Stop below must wait for item 1: it returns only after this opens.
    gate.Open();
  });
  q->Stop();
  opener.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(dropped, (std::vector<int>{2, 3}));
  EXPECT_FALSE(q->Push(4));
  q.reset();
  EXPECT_EQ(ran.load(), 1);
}

TEST(WorkQueueTest, DropIfTakesOnlyMatchingQueuedItems) {
  Gate gate;
  std::vector<int> seen, dropped;
  WorkQueue<int> q({.name = "t", .threads = 1, .on_drop = [&](int& i) { dropped.push_back(i); }}, [&](int& i) {
    if (i == 0) gate.Pass();
    seen.push_back(i);
  });
  ASSERT_TRUE(q.Push(0));
  gate.WaitForWaiting(1);
  for (int i = 1; i <= 6; ++i) ASSERT_TRUE(q.Push(int{i}, 1));
  EXPECT_EQ(q.DropIf([](const int& i) { return i % 2 == 0 || i == 0; }), 3u);
  EXPECT_EQ(q.queued_cost(), 3u);
  gate.Open();
  q.WaitIdle();
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 3, 5}));
  EXPECT_EQ(dropped, (std::vector<int>{2, 4, 6}));
}

TEST(WorkQueueTest, ThreadsRunItemsConcurrently) {
  Gate gate;
  WorkQueue<int> q({.name = "t", .threads = 3}, [&](int&) { gate.Pass(); });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.Push(int{i}));
  gate.WaitForWaiting(3);  // would hang with fewer than 3 threads running at once
  EXPECT_EQ(q.pending(), 3u);
  gate.Open();
  q.WaitIdle();
}

TEST(WorkQueueTest, CountRunningBoundsWhatRunningItemsHold) {
  Gate gate;
  WorkQueue<int> q({.name = "t", .threads = 1, .max_cost = 100, .count_running = true}, [&](int&) { gate.Pass(); });
  ASSERT_TRUE(q.Push(1, 60));
  gate.WaitForWaiting(1);  // item 1 runs and still counts
  EXPECT_FALSE(q.Push(2, 50)) << "60 running + 50 > 100";
  EXPECT_TRUE(q.Push(3, 40));
  gate.Open();
  q.WaitIdle();
  EXPECT_TRUE(q.Push(4, 100)) << "nothing held any more";
}

TEST(WorkQueueTest, DropOldestMakesRoomForTheNewest) {
  Gate gate;
  std::vector<int> seen, dropped;
  WorkQueue<int> q({.name = "t", .threads = 1, .max_items = 2, .drop_oldest = true,
                    .on_drop = [&](int& i) { dropped.push_back(i); }},
                   [&](int& i) {
                     if (i == 0) gate.Pass();
                     seen.push_back(i);
                   });
  ASSERT_TRUE(q.Push(0));
  gate.WaitForWaiting(1);
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(q.Push(int{i}));
  EXPECT_EQ(q.queued(), 2u);
  gate.Open();
  q.WaitIdle();
  EXPECT_EQ(seen, (std::vector<int>{0, 4, 5}));
  EXPECT_EQ(dropped, (std::vector<int>{1, 2, 3}));
}

TEST(WorkQueueTest, AnIndexedHandlerSeesItsThread) {
  Gate gate;
  Mutex mu;
  std::vector<int> per_thread(3);  // each slot written only by its own thread
  std::set<size_t> indexes;
  WorkQueue<int> q({.name = "t", .threads = 3}, [&](int&, size_t thread) {
    {
      MutexLock l(&mu);
      indexes.insert(thread);
    }
    ++per_thread.at(thread);
    gate.Pass();
  });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.Push(int{i}));
  gate.WaitForWaiting(3);  // one item on each thread
  gate.Open();
  q.WaitIdle();
  MutexLock l(&mu);
  EXPECT_EQ(indexes, (std::set<size_t>{0, 1, 2}));
  EXPECT_EQ(per_thread, (std::vector<int>{1, 1, 1}));
}

}  // namespace
}  // namespace hoard
