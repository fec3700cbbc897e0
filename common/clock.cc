#include "common/clock.h"

#include <ctime>
#include <thread>

namespace hoard {
namespace {
class RealClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  int64_t WallSeconds() const override { return static_cast<int64_t>(::time(nullptr)); }
  void SleepFor(std::chrono::nanoseconds d) const override { std::this_thread::sleep_for(d); }
  bool WaitUntil(CondVar* cv, Mutex* mu, std::chrono::steady_clock::time_point deadline) const override
      REQUIRES(mu) {
    return cv->WaitUntil(mu, deadline);
  }
};

// How often a FakeClock's waits look at its time, in real time.
constexpr auto kFakePoll = std::chrono::milliseconds(1);
}  // namespace

void FakeClock::SleepFor(std::chrono::nanoseconds d) const {
  const auto deadline = Now() + d;
  ++waiters_;
  while (Now() < deadline) std::this_thread::sleep_for(kFakePoll);
  --waiters_;
}

bool FakeClock::WaitUntil(CondVar* cv, Mutex* mu, std::chrono::steady_clock::time_point deadline) const {
  if (Now() >= deadline) return false;
  // One poll, then back to the caller, notified or not: a notification sent
  // while this thread was between polls (re-taking `mu`) reaches no one, and
  // with time standing still a loop here would wait for it forever. The
  // caller re-checks its condition (waits may return early).
  ++waiters_;
  cv->WaitFor(mu, kFakePoll);
  --waiters_;
  return Now() < deadline;
}

Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

}  // namespace hoard
