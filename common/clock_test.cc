#include "common/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/testing.h"

namespace hoard {
namespace {

using std::chrono::seconds;

TEST(FakeClockTest, SleepForReturnsOnlyOnceAdvancePassesTheDeadline) {
  FakeClock clock;
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepFor(seconds(30));
    woke = true;
  });
  // Advance only once the sleeper has taken its deadline (30 s from now).
  ASSERT_TRUE(testing::Eventually([&] { return clock.waiters() == 1; }));
  clock.Advance(seconds(29));
  // The sleeper cannot wake before its deadline whatever the real time: it
  // only looks at the fake clock, which stays 1 s short until the next step.
  EXPECT_FALSE(woke.load());
  clock.Advance(seconds(1));
  sleeper.join();
  EXPECT_TRUE(woke.load());
}

TEST(FakeClockTest, WaitUntilEndsOnNotifyOrOnTheFakeDeadline) {
  FakeClock clock;
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread notifier([&] {
    MutexLock l(&mu);
    ready = true;
    cv.NotifyAll();
  });
  {
    MutexLock l(&mu);
    const auto deadline = clock.Now() + seconds(3600);
    while (!ready) ASSERT_TRUE(clock.WaitUntil(&cv, &mu, deadline));  // fake time never moves here
  }
  notifier.join();

  const auto deadline = clock.Now() + seconds(10);
  // The deadline is taken: whenever the step lands, the waits below end.
  std::thread advancer([&] { clock.Advance(seconds(10)); });
  {
    MutexLock l(&mu);
    bool notified = true;
    while (notified) notified = clock.WaitUntil(&cv, &mu, deadline);
    EXPECT_GE(clock.Now(), deadline);
  }
  advancer.join();
}

}  // namespace
}  // namespace hoard
