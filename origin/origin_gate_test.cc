#include "origin/origin_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/testing.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using Priority = OriginGate::Priority;
using testing::Eventually;

double Seconds(SteadyClock::time_point since) {
  return std::chrono::duration<double>(SteadyClock::now() - since).count();
}

TEST(OriginGateTest, NeverMoreReadsInFlightThanConnections) {
  OriginGate gate({.connections = 3});
  std::atomic<int> now{0}, most{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) {
        OriginGate::Slot slot = gate.Acquire(i % 2 == 0 ? Priority::kDemand : Priority::kWarm);
        int n = ++now;
        int m = most.load();
        while (n > m && !most.compare_exchange_weak(m, n)) {
        }
        std::this_thread::sleep_for(200us);
        --now;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(most.load(), 3);
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(OriginGateTest, AFreedSlotGoesToAWaitingDemandReadFirst) {
  OriginGate gate({.connections = 1});
  OriginGate::Slot held = gate.Acquire(Priority::kWarm);
  std::atomic<int> order{0}, warm_got{0}, demand_got{0};
  std::thread warm([&] {
    OriginGate::Slot s = gate.Acquire(Priority::kWarm);
    warm_got = ++order;
  });
  // The warm-up read queues first (it counts its wait before waiting).
  ASSERT_TRUE(Eventually([&] { return gate.warm_waits() == 1; }));
  std::thread demand([&] {
    OriginGate::Slot s = gate.Acquire(Priority::kDemand);
    demand_got = ++order;
  });
  ASSERT_TRUE(Eventually([&] { return gate.demand_waiting() == 1; }));
  EXPECT_EQ(order.load(), 0);
  held.Release();
  demand.join();
  warm.join();
  EXPECT_EQ(demand_got.load(), 1);
  EXPECT_EQ(warm_got.load(), 2);
  EXPECT_GE(gate.warm_waits(), 1u);
}

TEST(OriginGateTest, RaisingTheLimitWakesWaiters) {
  OriginGate gate({.connections = 1});
  OriginGate::Slot held = gate.Acquire(Priority::kDemand);
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    OriginGate::Slot s = gate.Acquire(Priority::kWarm);
    got = true;
  });
  ASSERT_TRUE(Eventually([&] { return gate.warm_waits() == 1; }));  // it waits for a slot
  EXPECT_FALSE(got.load());
  gate.SetLimits({.connections = 2});
  EXPECT_TRUE(Eventually([&] { return got.load(); }, 2s));
  waiter.join();
}

TEST(OriginGateTest, WarmUpReadsKeepTheByteRate) {
  const double rate = 20e6;
  OriginGate gate({.bytes_per_s = rate});
  const auto start = SteadyClock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 10; ++k) gate.Pace(Priority::kWarm, 1 << 20);
    });
  }
  for (auto& t : threads) t.join();
  // 40 MiB at 20 MB/s, less the one burst (1 MiB) that starts full.
  const double expected = (40.0 * (1 << 20) - (1 << 20)) / rate;
  EXPECT_GT(Seconds(start), expected * 0.9);
  EXPECT_LT(Seconds(start), expected * 1.5);
}

TEST(OriginGateTest, DemandReadsDoNotQueueBehindTheWarmUp) {
  // Time stands still unless the test moves it: a read that had to wait for
  // the budget would wait for good.
  FakeClock clock;
  OriginGate gate({.bytes_per_s = 10e6}, &clock);
  gate.Pace(Priority::kWarm, 1 << 20);  // the warm-up spends the burst the budget starts with
  std::atomic<int> warmed{0};
  std::vector<std::thread> warmers;
  for (int i = 0; i < 4; ++i) {
    warmers.emplace_back([&] {
      gate.Pace(Priority::kWarm, 1 << 20);
      ++warmed;
    });
  }
  // Each demand read waits at most for the debt of one burst (four of these
  // reads make one), never for the warm-up reads waiting for budget.
  std::future<void> demand = std::async(std::launch::async, [&] {
    for (int k = 0; k < 4; ++k) gate.Pace(Priority::kDemand, 256 << 10);
  });
  ASSERT_EQ(demand.wait_for(10s), std::future_status::ready) << "a demand read waited for time to pass";
  EXPECT_EQ(warmed.load(), 0) << "the warm-up waits for the rate to pay the debt back";
  // As time passes, the rate pays for the warm-up reads too.
  while (warmed.load() < 4) {
    clock.Advance(10ms);
    std::this_thread::yield();
  }
  for (auto& t : warmers) t.join();
}

TEST(OriginGateTest, NoLimitsMeansNoWaiting) {
  OriginGate gate;
  std::vector<OriginGate::Slot> slots;
  for (int i = 0; i < 100; ++i) slots.push_back(gate.Acquire(Priority::kWarm));
  const auto start = SteadyClock::now();
  for (int i = 0; i < 100; ++i) gate.Pace(Priority::kWarm, 64 << 20);
  EXPECT_LT(Seconds(start), 0.1);
  EXPECT_EQ(gate.in_flight(), 100);
}

proto::ClusterMap MapOf(std::vector<std::pair<std::string, double>> nodes, uint32_t conns, uint64_t rate) {
  proto::ClusterMap m;
  for (auto& [name, w] : nodes) m.nodes.push_back(proto::NodeInfo{.name = name, .weight = w, .up = true});
  m.origin_limits = {.max_connections = conns, .max_bytes_per_s = rate};
  return m;
}

TEST(OriginGateTest, ANodeGetsItsWeightsShareOfTheClusterLimits) {
  proto::ClusterMap m = MapOf({{"a", 1000}, {"b", 3000}}, 16, 800'000'000);
  OriginGate::Limits a = NodeShareOfOriginLimits(m, "a", 64);
  OriginGate::Limits b = NodeShareOfOriginLimits(m, "b", 64);
  EXPECT_EQ(a.connections, 4);
  EXPECT_EQ(b.connections, 12);
  EXPECT_DOUBLE_EQ(a.bytes_per_s, 200e6);
  EXPECT_DOUBLE_EQ(b.bytes_per_s, 600e6);
  // The node's own pool caps its share; no cluster limit means the pool.
  EXPECT_EQ(NodeShareOfOriginLimits(m, "b", 8).connections, 8);
  EXPECT_EQ(NodeShareOfOriginLimits(MapOf({{"a", 1}}, 0, 0), "a", 16).connections, 16);
  EXPECT_EQ(NodeShareOfOriginLimits(MapOf({{"a", 1}}, 0, 0), "a", 16).bytes_per_s, 0);
  // At least one connection, however many nodes share the limit.
  EXPECT_EQ(NodeShareOfOriginLimits(MapOf({{"a", 1}, {"b", 1}, {"c", 1}}, 2, 0), "c", 16).connections, 1);
  // A draining node (weight 0) still reads through: an equal share.
  m.nodes[0].draining = true;
  EXPECT_DOUBLE_EQ(NodeShareOfOriginLimits(m, "a", 64).bytes_per_s, 400e6);
  EXPECT_DOUBLE_EQ(NodeShareOfOriginLimits(m, "b", 64).bytes_per_s, 800e6);
}

TEST(OriginGateTest, HeldDownNodeGetsNoShareOfTheOrigin) {
  // "a" is down but held (within --out-after): it keeps its placement
  // weight, but reads nothing, so the up nodes share the whole limit.
  proto::ClusterMap m = MapOf({{"a", 1}, {"b", 1}, {"c", 2}}, 16, 800e6);
  m.nodes[0].up = false;
  m.nodes[0].held = true;
  ASSERT_GT(proto::PlacementWeight(m.nodes[0]), 0);
  EXPECT_DOUBLE_EQ(NodeShareOfOriginLimits(m, "b", 64).bytes_per_s, 800e6 / 3);
  EXPECT_DOUBLE_EQ(NodeShareOfOriginLimits(m, "c", 64).bytes_per_s, 800e6 * 2 / 3);
  EXPECT_EQ(NodeShareOfOriginLimits(m, "b", 64).connections, 5);  // 16 / 3, not 16 / 4
  EXPECT_EQ(NodeShareOfOriginLimits(m, "c", 64).connections, 10);
}

}  // namespace
}  // namespace hoard
