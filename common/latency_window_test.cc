#include "common/latency_window.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using namespace std::chrono_literals;

class LatencyWindowTest : public ::testing::Test {
 protected:
  // The defaults: 4 x p99 of the last 256 answers of the last minute, at
  // least 20 of them, between 100 ms and 1 s.
  LatencyWindow::Options options_;
  FakeClock clock_;

  void RecordMany(LatencyWindow& w, int n, std::chrono::nanoseconds each) {
    for (int i = 0; i < n; ++i) w.Record(each);
  }
};

TEST_F(LatencyWindowTest, WithTooFewSamplesTheDelayIsTheCap) {
  LatencyWindow w(options_, &clock_);
  EXPECT_EQ(w.HedgeDelay(), 1000ms) << "no samples: hedge only on a stall";
  RecordMany(w, 19, 1ms);
  EXPECT_EQ(w.HedgeDelay(), 1000ms) << "19 samples are not a p99";
  w.Record(1ms);
  EXPECT_EQ(w.HedgeDelay(), 100ms) << "20 fast answers: the floor";
}

TEST_F(LatencyWindowTest, TheDelayIsFourTimesTheP99BetweenFloorAndCap) {
  {
    LatencyWindow w(options_, &clock_);
    RecordMany(w, 100, 50ms);
    EXPECT_EQ(w.HedgeDelay(), 200ms);
  }
  {
    LatencyWindow w(options_, &clock_);
    RecordMany(w, 100, 20ms);  // 4 x 20 ms is under the floor
    EXPECT_EQ(w.HedgeDelay(), 100ms);
  }
  {
    LatencyWindow w(options_, &clock_);
    RecordMany(w, 100, 400ms);  // 4 x 400 ms is over the cap
    EXPECT_EQ(w.HedgeDelay(), 1000ms);
  }
  {
    LatencyWindow::Options o = options_;
    o.multiple = 2;
    o.floor = 10ms;
    o.cap = 50ms;
    LatencyWindow w(o, &clock_);
    RecordMany(w, 100, 3ms);
    EXPECT_EQ(w.HedgeDelay(), 10ms);
    RecordMany(w, 100, 20ms);  // now the p99 of 200 samples
    EXPECT_EQ(w.HedgeDelay(), 40ms);
  }
}

TEST_F(LatencyWindowTest, TheP99IgnoresOneOutlierInAHundredButNotTwo) {
  LatencyWindow w(options_, &clock_);
  RecordMany(w, 99, 30ms);
  w.Record(900ms);
  EXPECT_EQ(w.Quantile(0.99), 30ms);
  EXPECT_EQ(w.HedgeDelay(), 120ms);
  w.Record(900ms);  // 2 of 101
  EXPECT_EQ(w.Quantile(0.99), 900ms);
  EXPECT_EQ(w.HedgeDelay(), 1000ms);
}

TEST_F(LatencyWindowTest, OnlyTheLastCapacitySamplesCount) {
  options_.capacity = 64;
  LatencyWindow w(options_, &clock_);
  RecordMany(w, 64, 300ms);
  EXPECT_EQ(w.HedgeDelay(), 1000ms);
  RecordMany(w, 63, 40ms);
  EXPECT_EQ(w.HedgeDelay(), 1000ms) << "one slow sample left, and the p99 of 64 is their largest";
  w.Record(40ms);
  EXPECT_EQ(w.HedgeDelay(), 160ms) << "the slow samples were all pushed out";
  size_t n = 0;
  (void)w.Quantile(0.5, &n);
  EXPECT_EQ(n, 64u);
}

TEST_F(LatencyWindowTest, SamplesOlderThanMaxAgeNoLongerCount) {
  LatencyWindow w(options_, &clock_);
  RecordMany(w, 50, 300ms);
  EXPECT_EQ(w.HedgeDelay(), 1000ms);
  clock_.Advance(59s);
  RecordMany(w, 30, 40ms);
  EXPECT_EQ(w.HedgeDelay(), 1000ms) << "the slow ones are 59 s old: still in the window";
  clock_.Advance(2s);
  size_t n = 0;
  (void)w.Quantile(0.99, &n);
  EXPECT_EQ(n, 30u);
  EXPECT_EQ(w.HedgeDelay(), 160ms) << "only the 30 recent samples count";
  clock_.Advance(61s);
  EXPECT_EQ(w.HedgeDelay(), 1000ms) << "an idle minute: no basis, the cap";
}

}  // namespace
}  // namespace hoard
