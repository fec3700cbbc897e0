#include "common/task_pool.h"

#include <atomic>

#include <gtest/gtest.h>

#include "common/testing.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Gate;

TEST(TaskPoolTest, AClosureThatBlocksDoesNotDelayTheNext) {
  TaskPool pool({});
  Gate release, second_ran;
  pool.Run([&] { release.Wait(); });
  pool.Run([&] { second_ran.Open(); });
  // The first is still blocked: the second ran on a thread of its own.
  EXPECT_TRUE(second_ran.WaitFor(10s));
  release.Open();
}

TEST(TaskPoolTest, PastMaxThreadsClosuresQueueUntilAThreadIsFree) {
  TaskPool pool({.max_threads = 2});
  Gate release, third_ran;
  std::atomic<int> started{0};
  pool.Run([&] { ++started; release.Wait(); });
  pool.Run([&] { ++started; release.Wait(); });
  pool.Run([&] { third_ran.Open(); });
  ASSERT_TRUE(hoard::testing::Eventually([&] { return started.load() == 2; }));
  EXPECT_EQ(pool.threads(), 2u);
  EXPECT_FALSE(third_ran.WaitFor(100ms)) << "both threads are busy";
  release.Open();
  EXPECT_TRUE(third_ran.WaitFor(10s));
}

TEST(TaskPoolTest, TheDestructorWaitsForRunningAndQueuedClosures) {
  std::atomic<int> done{0};
  Gate never;
  {
    TaskPool pool({.max_threads = 1});
    // A request that takes a while (nobody opens the gate), and one queued
    // behind it on the only thread: both still run to the end.
    pool.Run([&] {
      EXPECT_FALSE(never.WaitFor(50ms));
      ++done;
    });
    pool.Run([&] { ++done; });
  }
  EXPECT_EQ(done.load(), 2);
}

TEST(TaskPoolTest, IdleThreadsBeyondKeepIdleExit) {
  TaskPool pool({.max_threads = 8, .keep_idle = 1, .idle_for = 20ms});
  Gate release;
  std::atomic<int> started{0};
  for (int i = 0; i < 4; ++i) pool.Run([&] { ++started; release.Wait(); });
  ASSERT_TRUE(hoard::testing::Eventually([&] { return started.load() == 4; }));
  EXPECT_EQ(pool.threads(), 4u);
  release.Open();
  EXPECT_TRUE(hoard::testing::Eventually([&] { return pool.threads() == 1; }));
  // The one left still works, and new ones start when needed.
  Gate ran;
  pool.Run([&] { ran.Open(); });
  EXPECT_TRUE(ran.WaitFor(10s));
}

}  // namespace
}  // namespace hoard
