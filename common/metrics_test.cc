#include "common/metrics.h"

#include <cmath>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

namespace hoard::metrics {
namespace {

TEST(MetricsTest, CounterAndGaugeRenderWithHelpAndType) {
  Registry r;
  Counter c;
  Gauge g;
  r.AddCounter("hoard_things_total", "Things seen", {}, &c);
  r.AddGauge("hoard_level", "A level", {{"disk", "a"}}, &g);
  c.Add(3);
  g.Set(0.25);
  EXPECT_EQ(r.Render(),
            "# HELP hoard_things_total Things seen\n"
            "# TYPE hoard_things_total counter\n"
            "hoard_things_total 3\n"
            "# HELP hoard_level A level\n"
            "# TYPE hoard_level gauge\n"
            "hoard_level{disk=\"a\"} 0.25\n");
}

TEST(MetricsTest, SeriesOfOneFamilyRenderTogether) {
  Registry r;
  r.AddCounter("hoard_bytes_total", "Bytes by source", {{"source", "disk"}}, [] { return 1.0; });
  r.AddGauge("hoard_other", "Other", {}, [] { return 2.0; });
  r.AddCounter("hoard_bytes_total", "ignored: the first HELP wins", {{"source", "peer"}}, [] { return 5e12; });
  EXPECT_EQ(r.Render(),
            "# HELP hoard_bytes_total Bytes by source\n"
            "# TYPE hoard_bytes_total counter\n"
            "hoard_bytes_total{source=\"disk\"} 1\n"
            "hoard_bytes_total{source=\"peer\"} 5000000000000\n"
            "# HELP hoard_other Other\n"
            "# TYPE hoard_other gauge\n"
            "hoard_other 2\n");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.AddGauge("hoard_x", "line one\nback\\slash \"quoted\"", {{"dataset", "a\"b\\c\nd"}, {"k", "v"}},
             [] { return 1.0; });
  EXPECT_EQ(r.Render(),
            "# HELP hoard_x line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE hoard_x gauge\n"
            "hoard_x{dataset=\"a\\\"b\\\\c\\nd\",k=\"v\"} 1\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  Histogram h({0.1, 1, 10});
  r.AddHistogram("hoard_op_seconds", "Op latency", {{"op", "read"}}, &h);
  h.Observe(0.05);
  h.Observe(0.1);  // on a bound: belongs to it (le)
  h.Observe(0.5);
  h.Observe(100);
  EXPECT_EQ(r.Render(),
            "# HELP hoard_op_seconds Op latency\n"
            "# TYPE hoard_op_seconds histogram\n"
            "hoard_op_seconds_bucket{op=\"read\",le=\"0.1\"} 2\n"
            "hoard_op_seconds_bucket{op=\"read\",le=\"1\"} 3\n"
            "hoard_op_seconds_bucket{op=\"read\",le=\"10\"} 3\n"
            "hoard_op_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"
            "hoard_op_seconds_sum{op=\"read\"} 100.65\n"
            "hoard_op_seconds_count{op=\"read\"} 4\n");
}

TEST(MetricsTest, EmptyHistogramRendersZeros) {
  Registry r;
  Histogram h(Histogram::LatencyBuckets());
  r.AddHistogram("hoard_lat_seconds", "L", {}, &h);
  const std::string text = r.Render();
  EXPECT_NE(text.find("hoard_lat_seconds_bucket{le=\"0.0001\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hoard_lat_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hoard_lat_seconds_sum 0\nhoard_lat_seconds_count 0\n"), std::string::npos) << text;
}

TEST(MetricsTest, CollectorFamiliesShowHelpEvenWithoutSeries) {
  Registry r;
  std::vector<Sample> samples;
  r.AddCollector("hoard_dataset_bytes", "Per dataset", Type::kGauge, [&] { return samples; });
  EXPECT_EQ(r.Render(), "# HELP hoard_dataset_bytes Per dataset\n# TYPE hoard_dataset_bytes gauge\n");
  samples = {{{{"dataset", "a"}}, 7}, {{{"dataset", "b"}}, 8}};
  EXPECT_EQ(r.Render(),
            "# HELP hoard_dataset_bytes Per dataset\n# TYPE hoard_dataset_bytes gauge\n"
            "hoard_dataset_bytes{dataset=\"a\"} 7\nhoard_dataset_bytes{dataset=\"b\"} 8\n");
}

TEST(MetricsTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(123456789012), "123456789012");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.33333333333333331");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  Counter c;
  Histogram h({1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Add();
        h.Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[0], 40000u);
  EXPECT_DOUBLE_EQ(s.sum, 20000);
}

TEST(MetricsTest, ScopedTimerObservesOnce) {
  Histogram h({0.001, 10});
  {
    ScopedTimer t(&h);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  { ScopedTimer none(nullptr); }
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.cumulative[0], 0u);  // slept 5 ms > 1 ms
  EXPECT_GE(s.sum, 0.005);
}

TEST(MetricsTest, ARenderedPartFollowsTheFamiliesAndCanComeAndGo) {
  Registry outer;
  Gauge leader;
  outer.AddGauge("hoard_leader", "leads", {}, &leader);
  auto part = std::make_unique<Registry>();
  part->AddGauge("hoard_part", "a part", {}, [] { return 7.0; });
  Registry* current = part.get();
  outer.AddRendered([&current] { return current ? current->Render() : std::string(); });
  const std::string with = outer.Render();
  EXPECT_NE(with.find("hoard_leader 0\n"), std::string::npos) << with;
  EXPECT_GT(with.find("hoard_part 7\n"), with.find("hoard_leader 0\n")) << with;
  current = nullptr;
  part.reset();
  EXPECT_EQ(outer.Render().find("hoard_part"), std::string::npos);
}

}  // namespace
}  // namespace hoard::metrics
