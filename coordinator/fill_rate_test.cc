#include "coordinator/fill_rate.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using namespace std::chrono_literals;

TEST(FillRateTest, IsTheBytesFilledOverTheLastWindow) {
  FillRate r(10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  EXPECT_EQ(r.Rate(t0), 0);
  // 100 MB/s for 30 s, reported once a second.
  for (int s = 0; s <= 30; ++s) r.Add(t0 + std::chrono::seconds(s), 100'000'000);
  EXPECT_NEAR(r.Rate(t0 + 30s), 100e6, 1e6);
  // Then 10 MB/s: within one window the rate follows.
  for (int s = 31; s <= 45; ++s) r.Add(t0 + std::chrono::seconds(s), 10'000'000);
  EXPECT_NEAR(r.Rate(t0 + 45s), 10e6, 1e6);
}

TEST(FillRateTest, FallsToZeroWhenFillingStops) {
  FillRate r(10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  for (int s = 0; s <= 5; ++s) r.Add(t0 + std::chrono::seconds(s), 50'000'000);
  EXPECT_GT(r.Rate(t0 + 5s), 40e6);
  EXPECT_LT(r.Rate(t0 + 10s), r.Rate(t0 + 5s));
  EXPECT_EQ(r.Rate(t0 + 16s), 0);
}

TEST(FillRateTest, TheFirstReportAfterAPauseCountsAsOneHeartbeatOfFilling) {
  FillRate r(10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  r.Add(t0, 1'000'000);
  r.Add(t0 + 100s, 20'000'000);  // resumes long after
  EXPECT_NEAR(r.Rate(t0 + 100s), 20e6, 1e6);
  r.Add(t0 + 101s, 20'000'000);
  EXPECT_NEAR(r.Rate(t0 + 101s), 20e6, 1e6);
}

}  // namespace
}  // namespace hoard
