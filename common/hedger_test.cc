// Hedger (common/hedger.h) with sources the test controls: each answers at
// once, fails, or blocks until the test opens its Gate. Delays are fixed
// (floor = cap, so the window's samples do not move them): 1 hour where a
// test must show that nothing is hedged, 20 ms where it must be. Hedge
// delays pass in real time; whether a peer is stalled (silent for the cap)
// goes by the FakeClock, which the tests move.
#include "common/hedger.h"

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/testing.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
using hoard::testing::Gate;
using Bytes = std::shared_ptr<const std::string>;
using Source = Hedger::Source<Bytes>;

constexpr uint64_t kEpoch = 3;

Hedger::Options FixedDelay(std::chrono::milliseconds delay, const Clock* clock) {
  Hedger::Options o;
  o.latency.floor = delay;
  o.latency.cap = delay;
  o.health.suspect_for = 5000ms;
  o.health.slow_after = 3;
  o.clock = clock;
  return o;
}

Bytes B(const std::string& s) { return std::make_shared<const std::string>(s); }

// Accepts any answer but "corrupt".
Status Verify(const Bytes& b) {
  return *b == "corrupt" ? Status::Corruption("bad bytes") : Status::Ok();
}

// A source that counts its calls and answers `value` at once.
Source Answers(const std::string& peer, Bytes value, std::atomic<int>* calls) {
  return Source{.peer = peer, .map_epoch = kEpoch, .fetch = [value, calls]() -> Result<Bytes> {
                  ++*calls;
                  return value;
                }};
}

// A source that answers `value` once `gate` opens (both outlive the Hedger).
Source AnswersWhenOpen(const std::string& peer, Bytes value, const Gate* gate, std::atomic<int>* calls) {
  return Source{.peer = peer, .map_epoch = kEpoch, .fetch = [value, gate, calls]() -> Result<Bytes> {
                  ++*calls;
                  gate->Wait();
                  return value;
                }};
}

class HedgerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Requests still blocked are let go before the Hedger (the last member,
    // so destroyed first) waits for them.
    OpenAll();
  }
  void Release() { stuck_.Open(); }
  // hedger_->Run, failing the test if it has not returned within 10 s (a
  // call that waits for a blocked source it should have hedged): the gates
  // are then opened so that it can return.
  Hedger::Outcome<Bytes> Run(std::vector<Source> sources, std::function<Status(const Bytes&)> verify = Verify,
                             Hedger::RunOptions run = {}) {
    auto call = std::async(std::launch::async, [&] { return hedger_->Run(std::move(sources), verify, run); });
    if (call.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << "Run did not return within 10 s";
      OpenAll();
    }
    return call.get();
  }
  void OpenAll() {
    Release();
    for (Gate* g : {&a_open_, &b_open_, &rounds_[0], &rounds_[1], &rounds_[2]}) g->Open();
  }
  Hedger& MakeHedger(std::chrono::milliseconds delay) {
    hedger_ = std::make_unique<Hedger>(FixedDelay(delay, &clock_));
    return *hedger_;
  }

  FakeClock clock_;
  Gate stuck_;  // what blocked sources wait for
  // Gates of single tests; members, so that a request returning from its
  // wait never outlives its gate.
  Gate a_open_, b_open_, rounds_[3];
  std::atomic<int> calls0_{0}, calls1_{0}, calls2_{0};
  // A PeerHealth a test shares with its Hedger: declared before hedger_ so
  // that a request still ending when the test body returns reports to a
  // live one (a local in the test body was gone by then).
  std::optional<PeerHealth> shared_health_;
  std::unique_ptr<Hedger> hedger_;
};

TEST_F(HedgerTest, AnAnswerWithinTheDelayIsTheOnlyRequest) {
  Hedger& hedger = MakeHedger(1h);
  Hedger::Outcome<Bytes> got =
      Run({Answers("a", B("from a"), &calls0_), Answers("b", B("from b"), &calls1_)}, Verify, {});
  ASSERT_TRUE(got.value.ok()) << got.value.status().ToString();
  EXPECT_EQ(**got.value, "from a");
  EXPECT_EQ(got.winner, 0);
  EXPECT_FALSE(got.hedged);
  EXPECT_EQ(calls1_.load(), 0) << "the next source was asked although the first answered in time";
  EXPECT_EQ(hedger.hedges(), 0u);
}

TEST_F(HedgerTest, ASlowSourceIsHedgedToTheNextWhichWins) {
  Hedger& hedger = MakeHedger(20ms);
  Hedger::Outcome<Bytes> got = Run(
      {AnswersWhenOpen("a", B("from a"), &stuck_, &calls0_), Answers("b", B("from b"), &calls1_),
       Answers("c", B("from c"), &calls2_)},
      Verify, {});
  ASSERT_TRUE(got.value.ok()) << got.value.status().ToString();
  EXPECT_EQ(**got.value, "from b");
  EXPECT_EQ(got.winner, 1);
  EXPECT_TRUE(got.hedged);
  EXPECT_EQ(calls0_.load(), 1) << "the first request stays in flight: it is not asked again";
  EXPECT_EQ(calls2_.load(), 0) << "only the next source is asked";
  EXPECT_EQ(hedger.hedges(), 1u);
  EXPECT_EQ(hedger.hedges_won(), 1u);
  // The first request is still in flight and overdue, but a was asked just
  // now (it may be busy): it keeps its requests until it has been silent
  // for the longest delay; then it is skipped.
  EXPECT_FALSE(hedger.Suspect("a", kEpoch));
  clock_.Advance(20ms);
  EXPECT_TRUE(hedger.Suspect("a", kEpoch));
  EXPECT_FALSE(hedger.Suspect("b", kEpoch));
}

TEST_F(HedgerTest, TheFirstGoodAnswerWinsAndALaterOneIsDropped) {
  Hedger& hedger = MakeHedger(20ms);
  // b makes its answer when asked (a source holding a copy would share it).
  Source b{.peer = "b", .map_epoch = kEpoch, .fetch = []() -> Result<Bytes> { return B("from b"); }};
  Hedger::Outcome<Bytes> got = Run({AnswersWhenOpen("a", B("from a"), &stuck_, &calls0_), b}, Verify, {});
  ASSERT_TRUE(got.value.ok());
  Bytes won = *got.value;
  // The loser answers now, after the call returned: its bytes go nowhere,
  // and the winner's are untouched. (Both answers are latency samples: the
  // second is a's, recorded as its request ends.)
  Release();
  auto samples = [&] {
    size_t n = 0;
    hedger.latency().Quantile(1.0, &n);
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return samples() == 2; })) << "the loser's request never ended";
  EXPECT_EQ(*won, "from b");
  EXPECT_EQ(won.use_count(), 2) << "only the caller (and `got`) hold the winner's bytes";
}

TEST_F(HedgerTest, AFailedSourceHandsOverAtOnceWithoutAHedge) {
  Hedger& hedger = MakeHedger(1h);
  Source down{.peer = "a", .map_epoch = kEpoch, .fetch = []() -> Result<Bytes> {
                return Status::Unavailable("connection refused");
              }};
  Hedger::Outcome<Bytes> got = Run({down, Answers("b", B("from b"), &calls1_)}, Verify, {});
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(**got.value, "from b");
  EXPECT_FALSE(got.hedged) << "b was asked after a ended, not beside it";
  EXPECT_EQ(hedger.hedges(), 0u);
  EXPECT_EQ(got.failures[0].code(), Code::kUnavailable);
  EXPECT_TRUE(hedger.Suspect("a", kEpoch)) << "no answer at all: suspect, as a dead peer";
}

TEST_F(HedgerTest, ACorruptAnswerDoesNotWin) {
  Hedger& hedger = MakeHedger(1h);
  Hedger::Outcome<Bytes> got = Run(
      {Answers("a", B("corrupt"), &calls0_), Answers("b", B("from b"), &calls1_)}, Verify, {});
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(**got.value, "from b");
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(got.failures[0].code(), Code::kCorruption);
  EXPECT_FALSE(hedger.Suspect("a", kEpoch)) << "it answered: not a dead peer";
}

TEST_F(HedgerTest, ACorruptAnswerFromTheHedgedSourceDoesNotWinEither) {
  // a is slow, so b is asked too; then a's answer comes first, and is bad;
  // b's good answer comes only after a's was checked, and wins.
  MakeHedger(20ms);
  auto verify = [this](const Bytes& b) -> Status {
    if (*b != "corrupt") return Status::Ok();
    ++calls2_;
    b_open_.Open();
    return Status::Corruption("bad bytes");
  };
  Source b = AnswersWhenOpen("b", B("from b"), &b_open_, &calls1_);
  b.fetch = [inner = b.fetch, this]() {
    a_open_.Open();  // b was asked: now let a answer
    return inner();
  };
  Hedger::Outcome<Bytes> got =
      Run({AnswersWhenOpen("a", B("corrupt"), &a_open_, &calls0_), b}, verify, {});
  ASSERT_TRUE(got.value.ok()) << got.value.status().ToString();
  EXPECT_EQ(**got.value, "from b");
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(calls2_.load(), 1) << "a's bad answer was checked (and refused)";
}

TEST_F(HedgerTest, ASourceThatThrowsFailsLikeAnyOther) {
  MakeHedger(1h);
  Source throws{.peer = "a", .map_epoch = kEpoch, .fetch = []() -> Result<Bytes> {
                  throw std::runtime_error("too many open sockets");
                }};
  Hedger::Outcome<Bytes> got = Run({throws, Answers("b", B("from b"), &calls1_)});
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(**got.value, "from b");
  EXPECT_EQ(got.failures[0].code(), Code::kInternal);
}

TEST_F(HedgerTest, WhenEverySourceFailsTheLastFailureIsReturned) {
  MakeHedger(1h);
  Source a{.peer = "a", .map_epoch = kEpoch, .fetch = []() -> Result<Bytes> { return Status::NotFound("not here"); }};
  Source origin{.fetch = []() -> Result<Bytes> { return Status::Stale("the file changed"); }};
  Hedger::Outcome<Bytes> got = Run({a, Answers("b", B("corrupt"), &calls1_), origin}, Verify, {});
  ASSERT_FALSE(got.value.ok());
  EXPECT_EQ(got.value.status().code(), Code::kStale);
  EXPECT_EQ(got.winner, -1);
  EXPECT_EQ(got.failures[0].code(), Code::kNotFound);
  EXPECT_EQ(got.failures[1].code(), Code::kCorruption);
  EXPECT_EQ(got.failures[2].code(), Code::kStale);
}

TEST_F(HedgerTest, WithoutGiveUpTheLastSourceIsWaitedFor) {
  Hedger& hedger = MakeHedger(20ms);
  std::thread opener([&] {
    // Once the request is overdue, let it answer.
    EXPECT_TRUE(Eventually([&] { return hedger.overdue() == 1; }));
    Release();
  });
  Hedger::Outcome<Bytes> got = Run({AnswersWhenOpen("a", B("late"), &stuck_, &calls0_)}, Verify, {});
  opener.join();
  ASSERT_TRUE(got.value.ok()) << got.value.status().ToString();
  EXPECT_EQ(**got.value, "late");
  EXPECT_EQ(hedger.gave_up(), 0u);
}

TEST_F(HedgerTest, GiveUpReturnsOnceEveryRequestIsOverdue) {
  Hedger& hedger = MakeHedger(20ms);
  Hedger::Outcome<Bytes> got =
      Run({AnswersWhenOpen("a", B("from a"), &stuck_, &calls0_),
                         AnswersWhenOpen("b", B("from b"), &stuck_, &calls1_)},
                        Verify, {.give_up_when_overdue = true});
  ASSERT_FALSE(got.value.ok());
  EXPECT_EQ(got.value.status().code(), Code::kUnavailable);
  EXPECT_EQ(calls0_.load() + calls1_.load(), 2) << "both were asked before giving up";
  EXPECT_EQ(hedger.gave_up(), 1u);
}

// The origin: asked beside a peer only once the peer is stalled. `asked`,
// when given, opens at its first call.
Source Origin(Bytes value, std::atomic<int>* calls, Gate* asked = nullptr) {
  return Source{.fetch = [value, calls, asked]() -> Result<Bytes> {
                  ++*calls;
                  if (asked != nullptr) asked->Open();
                  return value;
                },
                .only_past_stalled_peers = true};
}

TEST_F(HedgerTest, TheOriginIsAskedBesideAPeerThatAnswersNothing) {
  Hedger& hedger = MakeHedger(20ms);
  std::thread watcher([&] {
    // Overdue, and silent for the longest delay since it was asked.
    EXPECT_TRUE(Eventually([&] { return hedger.overdue() == 1; }));
    clock_.Advance(20ms);
  });
  Hedger::Outcome<Bytes> got =
      Run({AnswersWhenOpen("a", B("from a"), &stuck_, &calls0_), Origin(B("from the origin"), &calls1_)});
  watcher.join();
  ASSERT_TRUE(got.value.ok()) << got.value.status().ToString();
  EXPECT_EQ(**got.value, "from the origin");
  EXPECT_TRUE(got.hedged);
  EXPECT_EQ(hedger.hedges_won(), 1u);
}

TEST_F(HedgerTest, TheOriginIsNotAskedBesideAPeerThatIsBusyAnsweringOthers) {
  // a answers a request now (the FakeClock's now, which stays put until the
  // test moves it): it is busy, not stuck, while its next request is slow.
  Hedger& hedger = MakeHedger(20ms);
  ASSERT_EQ(Run({Answers("a", B("from a"), &calls2_)}).winner, 0);
  std::thread watcher([&] {
    // Once the slow request is overdue, give the Hedger ten delays (and
    // ten of its re-checks) to (wrongly) ask the origin; then let a's last
    // answer age past the quiet time that makes it stalled.
    EXPECT_TRUE(Eventually([&] { return hedger.overdue() == 1; }));
    EXPECT_FALSE(hedger.Suspect("a", kEpoch)) << "a busy peer keeps its other requests";
    EXPECT_FALSE(b_open_.WaitFor(200ms)) << "the origin was asked beside a peer that had just answered";
    clock_.Advance(1s);
    EXPECT_TRUE(hedger.Suspect("a", kEpoch)) << "stalled now, with a request overdue";
  });
  Hedger::Outcome<Bytes> got =
      Run({AnswersWhenOpen("a", B("from a"), &stuck_, &calls0_), Origin(B("from the origin"), &calls1_, &b_open_)});
  watcher.join();
  ASSERT_TRUE(got.value.ok()) << got.value.status().ToString();
  EXPECT_EQ(**got.value, "from the origin") << "once a answered nothing for a while, the origin was asked";
  EXPECT_EQ(calls1_.load(), 1);
}

TEST_F(HedgerTest, AnotherOwnerIsAskedBesideABusyPeer) {
  Hedger& hedger = MakeHedger(20ms);
  ASSERT_EQ(Run({Answers("a", B("from a"), &calls2_)}).winner, 0);
  Hedger::Outcome<Bytes> got = Run({AnswersWhenOpen("a", B("from a"), &stuck_, &calls0_),
                                    Answers("b", B("from b"), &calls1_), Origin(B("from the origin"), &calls2_)});
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(**got.value, "from b");
  EXPECT_TRUE(got.hedged);
  EXPECT_EQ(hedger.hedges(), 1u);
}

TEST_F(HedgerTest, APeerSlowThreeTimesInARowIsSkippedUntilItsSuspicionEnds) {
  Hedger& hedger = MakeHedger(20ms);
  // a's request of round i answers when rounds_[i] opens; null: at once.
  auto a = [&](const Gate* gate) {
    return Source{.peer = "a", .map_epoch = kEpoch, .fetch = [this, gate]() -> Result<Bytes> {
                    ++calls0_;
                    if (gate != nullptr) gate->Wait();
                    return B("from a");
                  }};
  };
  for (int i = 0; i < 3; ++i) {
    Hedger::Outcome<Bytes> got = Run({a(&rounds_[i]), Answers("b", B("from b"), &calls1_)}, Verify, {});
    ASSERT_EQ(got.winner, 1);
    EXPECT_TRUE(got.hedged);
    EXPECT_EQ(hedger.slow_suspicions(), i < 2 ? 0u : 1u);
    rounds_[i].Open();
    // A request still in flight and overdue gets its peer skipped (rule 3);
    // once the first two end, a is asked again.
    if (i < 2) {
      ASSERT_TRUE(Eventually([&] { return !hedger.Suspect("a", kEpoch); }));
    }
  }
  // The third slow request in a row made a suspect: it is skipped, also
  // once that request has ended.
  const int asked = calls0_.load();
  Hedger::Outcome<Bytes> got = Run({a(nullptr), Answers("b", B("from b"), &calls1_)}, Verify, {});
  EXPECT_EQ(got.winner, 1);
  EXPECT_FALSE(got.hedged) << "b was asked first";
  EXPECT_EQ(calls0_.load(), asked);
  EXPECT_TRUE(hedger.Suspect("a", kEpoch));
  // But it answers (late): with only the origin left, it is asked rather
  // than the origin (it may be reading through from there already).
  got = Run({a(nullptr), Origin(B("from the origin"), &calls2_)});
  EXPECT_EQ(got.winner, 0);
  EXPECT_EQ(calls2_.load(), 0) << "the origin was asked instead of a peer that is slow, not gone";

  // The suspicion ends; a is asked again and, fast now, answers in time.
  clock_.Advance(5001ms);
  ASSERT_TRUE(Eventually([&] { return !hedger.Suspect("a", kEpoch); }));
  got = Run({a(nullptr), Answers("b", B("from b"), &calls1_)}, Verify, {});
  EXPECT_EQ(got.winner, 0);
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(**got.value, "from a");
  EXPECT_FALSE(got.hedged);
  EXPECT_EQ(hedger.slow_suspicions(), 1u);
}

// A PeerHealth shared with another asker of the same peers (the mount's
// PeerChunkClient) is the Hedger's: a peer the other found unreachable is
// skipped, and what the Hedger learns the other sees.
TEST_F(HedgerTest, ASharedPeerHealthIsTheOneSuspicionState) {
  PeerHealth& shared = shared_health_.emplace(PeerHealth::Options{.suspect_for = 5000ms, .slow_after = 3}, &clock_);
  Hedger::Options o = FixedDelay(1h, &clock_);
  o.shared_health = &shared;
  hedger_ = std::make_unique<Hedger>(o);
  shared.Finished("a", kEpoch, /*answered=*/false, /*timely=*/false, /*overdue=*/false);
  Hedger::Outcome<Bytes> got =
      Run({Answers("a", B("from a"), &calls0_), Answers("b", B("from b"), &calls1_)}, Verify, {});
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(calls0_.load(), 0) << "a peer the shared state holds suspect was asked";
  EXPECT_TRUE(hedger_->Suspect("a", kEpoch));
  got = Run({Source{.peer = "c", .map_epoch = kEpoch,
                    .fetch = []() -> Result<Bytes> { return Status::Unavailable("no answer"); }},
             Answers("b", B("from b"), &calls1_)},
            Verify, {});
  EXPECT_EQ(got.winner, 1);
  // (The request reports its end to PeerHealth after Run has its answer.)
  EXPECT_TRUE(Eventually([&] { return shared.Check("c", kEpoch, 1s) == PeerHealth::Standing::kSuspect; }));
}

}  // namespace
}  // namespace hoard
