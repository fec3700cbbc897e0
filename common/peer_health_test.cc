#include "common/peer_health.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kEpoch = 7;
// No answer for this long makes a peer stalled (rule 3).
constexpr std::chrono::milliseconds kQuiet{100};
using Standing = PeerHealth::Standing;

class PeerHealthTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  PeerHealth health_{PeerHealth::Options{.suspect_for = 5000ms, .slow_after = 3}, &clock_};

  PeerHealth::Standing Check(const std::string& peer, uint64_t epoch = kEpoch) {
    return health_.Check(peer, epoch, kQuiet);
  }
  // Whether a reader would pass `peer` over for another owner.
  bool Skipped(const std::string& peer, uint64_t epoch = kEpoch) { return Check(peer, epoch) != Standing::kGood; }

  // A request to `peer` that went overdue and then ended, answered late.
  bool SlowRequest(const std::string& peer) {
    const bool became = health_.Overdue(peer, kEpoch);
    health_.Finished(peer, kEpoch, /*answered=*/true, /*timely=*/false, /*overdue=*/true);
    return became;
  }
  void TimelyAnswer(const std::string& peer) {
    health_.Finished(peer, kEpoch, /*answered=*/true, /*timely=*/true, /*overdue=*/false);
  }
};

TEST_F(PeerHealthTest, APeerThatDoesNotAnswerIsSuspectForAWhile) {
  EXPECT_FALSE(Skipped("a", kEpoch));
  health_.Finished("a", kEpoch, /*answered=*/false, /*timely=*/false, /*overdue=*/false);
  EXPECT_TRUE(Skipped("a", kEpoch));
  EXPECT_FALSE(Skipped("b", kEpoch));
  clock_.Advance(4900ms);
  EXPECT_TRUE(Skipped("a", kEpoch));
  clock_.Advance(200ms);
  EXPECT_FALSE(Skipped("a", kEpoch));
  EXPECT_EQ(health_.slow_suspicions(), 0u) << "unreachable is not slow";
}

TEST_F(PeerHealthTest, ANewerMapEndsASuspicionAtOnce) {
  health_.Finished("a", kEpoch, false, false, false);
  EXPECT_TRUE(Skipped("a", kEpoch));
  EXPECT_FALSE(Skipped("a", kEpoch + 1)) << "the new map lists it up: it may have restarted";
  EXPECT_FALSE(Skipped("a", kEpoch));
}

TEST_F(PeerHealthTest, APeerWithAnOverdueRequestInFlightIsSkippedUntilItEnds) {
  EXPECT_FALSE(health_.Overdue("a", kEpoch)) << "one overdue request is not yet slowness";
  EXPECT_TRUE(Skipped("a", kEpoch)) << "but no new request should queue behind it";
  EXPECT_TRUE(Skipped("a", kEpoch + 1)) << "whatever the map says";
  health_.Finished("a", kEpoch, /*answered=*/true, /*timely=*/false, /*overdue=*/true);
  EXPECT_FALSE(Skipped("a", kEpoch));
}

TEST_F(PeerHealthTest, ABusyPeerIsNotSkippedForAnOverdueRequestUntilItStopsAnswering) {
  TimelyAnswer("a");  // it answers others...
  EXPECT_FALSE(health_.Overdue("a", kEpoch));  // ... while this one is slow
  EXPECT_FALSE(health_.Stalled("a", kQuiet));
  EXPECT_FALSE(Skipped("a", kEpoch)) << "busy, not stuck: it keeps its requests";
  clock_.Advance(99ms);
  EXPECT_FALSE(Skipped("a", kEpoch));
  clock_.Advance(1ms);
  EXPECT_TRUE(health_.Stalled("a", kQuiet));
  EXPECT_TRUE(Skipped("a", kEpoch)) << "no answer for 100 ms: stuck";
  TimelyAnswer("a");
  EXPECT_FALSE(Skipped("a", kEpoch)) << "it answered again";
  health_.Finished("a", kEpoch, /*answered=*/true, /*timely=*/false, /*overdue=*/true);
  clock_.Advance(1s);
  EXPECT_FALSE(Skipped("a", kEpoch)) << "nothing of it is overdue any more";
}

TEST_F(PeerHealthTest, APeerThatHasNotAnsweredYetIsStalledOnlyAQuietTimeAfterItWasFirstAsked) {
  EXPECT_TRUE(health_.Stalled("a", kQuiet)) << "never asked: nothing says it is there";
  health_.Asked("a");
  EXPECT_FALSE(health_.Overdue("a", kEpoch));
  EXPECT_FALSE(health_.Stalled("a", kQuiet));
  EXPECT_EQ(Check("a"), Standing::kGood) << "just asked, maybe busy (a node that joined, filling its share)";
  clock_.Advance(kQuiet / 2);
  health_.Asked("a");  // a later request does not restart its silence
  clock_.Advance(kQuiet / 2);
  EXPECT_TRUE(health_.Stalled("a", kQuiet));
  EXPECT_EQ(Check("a"), Standing::kSuspect);
}

TEST_F(PeerHealthTest, AnAnswerFromLongAgoIsNoStallSilenceCountsFromTheNextRequest) {
  // It answered, then was not asked for a while (or it restarted since).
  health_.Asked("a");
  TimelyAnswer("a");
  clock_.Advance(10s);
  EXPECT_TRUE(health_.Stalled("a", kQuiet)) << "silent for 10 s, but nobody asked it anything";
  health_.Asked("a");
  EXPECT_FALSE(health_.Overdue("a", kEpoch));
  EXPECT_EQ(Check("a"), Standing::kGood) << "its first request since gets the quiet time";
  clock_.Advance(kQuiet);
  EXPECT_EQ(Check("a"), Standing::kSuspect);
}

TEST_F(PeerHealthTest, RepeatedSlownessMakesAPeerSuspectAndATimelyAnswerClearsIt) {
  EXPECT_FALSE(SlowRequest("a"));
  EXPECT_FALSE(SlowRequest("a"));
  EXPECT_FALSE(Skipped("a", kEpoch)) << "two slow requests in a row";
  EXPECT_TRUE(SlowRequest("a")) << "the third makes it suspect";
  EXPECT_EQ(health_.slow_suspicions(), 1u);
  EXPECT_EQ(Check("a"), Standing::kSlow) << "also once the request ended; but it answers: slow, not gone";
  clock_.Advance(kQuiet);
  EXPECT_EQ(Check("a"), Standing::kSuspect) << "nothing from it for the quiet time: stalled too";
  EXPECT_FALSE(Skipped("b", kEpoch));

  // Requests that were in flight when it became suspect do not extend it.
  EXPECT_FALSE(SlowRequest("a"));
  EXPECT_EQ(health_.slow_suspicions(), 1u);
  clock_.Advance(4901ms);
  EXPECT_FALSE(Skipped("a", kEpoch)) << "the suspicion expired: worth another try";

  // Still slow: suspect again at the first overdue request.
  EXPECT_TRUE(SlowRequest("a"));
  EXPECT_EQ(health_.slow_suspicions(), 2u);
  clock_.Advance(5001ms);
  EXPECT_FALSE(Skipped("a", kEpoch));

  // Recovered: an answer within its delay clears the count.
  TimelyAnswer("a");
  EXPECT_FALSE(SlowRequest("a"));
  EXPECT_FALSE(SlowRequest("a"));
  EXPECT_FALSE(Skipped("a", kEpoch));
  EXPECT_EQ(health_.slow_suspicions(), 2u);
}

TEST_F(PeerHealthTest, SlownessMustBeInARow) {
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(SlowRequest("a"));
    EXPECT_FALSE(SlowRequest("a"));
    // An error reply within the delay is an answer too: the peer is there.
    health_.Finished("a", kEpoch, /*answered=*/true, /*timely=*/true, /*overdue=*/false);
  }
  EXPECT_FALSE(Skipped("a", kEpoch));
  EXPECT_EQ(health_.slow_suspicions(), 0u);
}

TEST_F(PeerHealthTest, AnOverdueRequestThatGetsNoAnswerMakesThePeerSuspect) {
  // A stopped peer: the request is overdue, then times out unanswered.
  EXPECT_FALSE(health_.Overdue("a", kEpoch));
  health_.Finished("a", kEpoch, /*answered=*/false, /*timely=*/false, /*overdue=*/true);
  EXPECT_TRUE(Skipped("a", kEpoch));
  clock_.Advance(5001ms);
  EXPECT_FALSE(Skipped("a", kEpoch));
}

}  // namespace
}  // namespace hoard
