#include "common/single_flight.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing.h"

namespace hoard {
namespace {

TEST(SingleFlightTest, ConcurrentCallersShareOneRun) {
  SingleFlight<int, int> flights;
  std::atomic<int> runs{0}, leaders{0};
  std::vector<std::thread> t;
  std::vector<int> got(16, 0);
  for (int i = 0; i < 16; ++i) {
    t.emplace_back([&, i] {
      bool leader = false;
      got[i] = flights.Do(7, [&] {
        ++runs;
        EXPECT_TRUE(testing::Eventually([&] { return flights.Followers(7) == 15; }));
        return 42;
      }, &leader);
      if (leader) ++leaders;
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(leaders.load(), 1);
  for (int v : got) EXPECT_EQ(v, 42);
}

TEST(SingleFlightTest, NothingIsRememberedAfterwards) {
  SingleFlight<int, int> flights;
  int calls = 0;
  EXPECT_EQ(flights.Do(1, [&] { return ++calls; }), 1);
  EXPECT_EQ(flights.Do(1, [&] { return ++calls; }), 2) << "a finished flight is not a cache";
  EXPECT_EQ(flights.Do(2, [&] { return ++calls; }), 3);
}

TEST(SingleFlightTest, AThrowingLeaderReleasesEveryone) {
  SingleFlight<int, int> flights;
  std::atomic<int> threw{0};
  std::vector<std::thread> t;
  for (int i = 0; i < 8; ++i) {
    t.emplace_back([&] {
      try {
        flights.Do(1, [&]() -> int {
          EXPECT_TRUE(testing::Eventually([&] { return flights.Followers(1) == 7; }));
          throw std::runtime_error("boom");
        });
      } catch (const std::runtime_error&) {
        ++threw;
      }
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(threw.load(), 8);
  EXPECT_EQ(flights.Do(1, [] { return 5; }), 5) << "the key is usable again";
}

}  // namespace
}  // namespace hoard
