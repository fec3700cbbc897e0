#include "common/fan_out.h"

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mutex.h"

namespace hoard {
namespace {

TEST(FanOutTest, RunsEveryIndexOnce) {
  TaskPool pool({.max_threads = 4});
  std::vector<std::atomic<int>> hits(1000);
  ASSERT_TRUE(FanOut(&pool, hits.size(), 4, [&](size_t i) {
    hits[i].fetch_add(1);
    return Status::Ok();
  }).ok());
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(FanOutTest, NoWorkAndNoPool) {
  EXPECT_TRUE(FanOut(nullptr, 0, 4, [](size_t) { return Status::Internal("never"); }).ok());
  int sum = 0;  // without a pool the caller runs every index, in order
  ASSERT_TRUE(FanOut(nullptr, 5, 4, [&](size_t i) {
    sum = sum * 10 + static_cast<int>(i);
    return Status::Ok();
  }).ok());
  EXPECT_EQ(sum, 1234);
}

TEST(FanOutTest, RunsWidthAtOnceAndNoMore) {
  TaskPool pool({.max_threads = 8});
  Mutex mu;
  CondVar cv;
  int running = 0, peak = 0;
  // Each call waits until 3 run at once (or all of the last ones do), so the
  // test hangs if fewer than 3 run together, and peak shows if more did.
  Status s = FanOut(&pool, 30, 3, [&](size_t i) {
    MutexLock l(&mu);
    ++running;
    peak = std::max(peak, running);
    cv.NotifyAll();
    const int want = i < 27 ? 3 : 1;
    while (running < want && peak < 3) cv.Wait(&mu);
    --running;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(peak, 3);
}

TEST(FanOutTest, StopsAfterTheFirstError) {
  TaskPool pool({.max_threads = 2});
  std::atomic<int> calls{0};
  Status s = FanOut(&pool, 1000, 1, [&](size_t i) {
    calls.fetch_add(1);
    return i == 10 ? Status::NoSpace("disk full at " + std::to_string(i)) : Status::Ok();
  });
  EXPECT_EQ(s.code(), Code::kNoSpace);
  EXPECT_EQ(s.message(), "disk full at 10");
  EXPECT_EQ(calls.load(), 11) << "width 1: nothing starts after the failure";
}

TEST(FanOutTest, CallableFromThePoolItself) {
  // Every pool thread is inside an outer FanOut: the inner ones get no helper
  // and must finish on their callers' threads.
  TaskPool pool({.max_threads = 2});
  std::atomic<int> inner{0};
  Status s = FanOut(&pool, 4, 2, [&](size_t) {
    return FanOut(&pool, 50, 4, [&](size_t) {
      inner.fetch_add(1);
      return Status::Ok();
    });
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(inner.load(), 200);
}

TEST(FanOutTest, EachSlotRunsOneIndexAtATime) {
  TaskPool pool({.max_threads = 4});
  std::vector<std::atomic<int>> busy(3);
  std::atomic<bool> overlap{false}, bad_slot{false};
  ASSERT_TRUE(FanOut(&pool, 300, 3, [&](size_t, size_t slot) {
    if (slot >= busy.size()) {
      bad_slot = true;
      return Status::Ok();
    }
    if (busy[slot].fetch_add(1) != 0) overlap = true;
    busy[slot].fetch_sub(1);
    return Status::Ok();
  }).ok());
  EXPECT_FALSE(bad_slot.load());
  EXPECT_FALSE(overlap.load());
}

}  // namespace
}  // namespace hoard
