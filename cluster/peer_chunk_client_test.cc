// PeerChunkClient against an in-memory twin of the wire: busy retries,
// failover to the next peer, suspicion and recovery, with time stepped by
// the test (no sleeps).
#include "cluster/peer_chunk_client.h"

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/mutex.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

// A FakeClock whose SleepFor moves time itself (and records the step): the
// client's busy waits are checked exactly, with no thread and no real wait.
class SteppingClock : public FakeClock {
 public:
  void SleepFor(std::chrono::nanoseconds d) const override {
    {
      MutexLock lock(&mu_);
      sleeps_.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(d));
    }
    const_cast<SteppingClock*>(this)->Advance(d);
  }
  std::vector<std::chrono::milliseconds> sleeps() const {
    MutexLock lock(&mu_);
    return sleeps_;
  }

 private:
  mutable Mutex mu_;
  mutable std::vector<std::chrono::milliseconds> sleeps_ GUARDED_BY(mu_);
};

// What a twin peer does with the next request.
enum class Answer { kChunk, kBusy, kNotFound, kUnavailable, kNoAnswer, kShort, kNewerEpoch };

// The in-memory twin of the wire: per endpoint, a script of answers (the
// last one repeats), and a count of the requests each got.
class TwinTransport : public ChunkTransport {
 public:
  explicit TwinTransport(std::string chunk) : chunk_(std::move(chunk)) {}

  void Script(const std::string& endpoint, std::deque<Answer> answers) {
    MutexLock lock(&mu_);
    scripts_[endpoint] = std::move(answers);
  }
  int asked(const std::string& endpoint) {
    MutexLock lock(&mu_);
    return asked_[endpoint];
  }

  Exchange GetChunk(const std::string& endpoint, const proto::GetChunk& req,
                    std::chrono::milliseconds) override {
    Answer a = Answer::kNoAnswer;
    {
      MutexLock lock(&mu_);
      ++asked_[endpoint];
      std::deque<Answer>& s = scripts_[endpoint];
      if (!s.empty()) {
        a = s.front();
        if (s.size() > 1) s.pop_front();
      }
    }
    Exchange x;
    x.answered = a != Answer::kNoAnswer;
    switch (a) {
      case Answer::kChunk:
      case Answer::kShort:
      case Answer::kNewerEpoch: {
        const std::string bytes = a == Answer::kShort ? chunk_.substr(1) : chunk_;
        x.reply = proto::ChunkData{.chunk_length = bytes.size(),
                                   .placement_epoch = req.placement_epoch + (a == Answer::kNewerEpoch ? 1 : 0)};
        x.payload = zmq::message_t(bytes.data(), bytes.size());
        break;
      }
      case Answer::kBusy:
        x.busy = true;
        x.reply = Status::Unavailable("busy");
        break;
      case Answer::kNotFound:
        x.reply = Status::NotFound("not here");
        break;
      case Answer::kUnavailable:
        x.reply = Status::Unavailable("origin read failed");
        break;
      case Answer::kNoAnswer:
        x.reply = Status::Unavailable("timed out");
        break;
    }
    return x;
  }

 private:
  const std::string chunk_;
  Mutex mu_;
  std::map<std::string, std::deque<Answer>> scripts_ GUARDED_BY(mu_);
  std::map<std::string, int> asked_ GUARDED_BY(mu_);
};

class PeerChunkClientTest : public ::testing::Test {
 protected:
  PeerChunkClientTest() : twin_(std::string(1000, 'x')) {}

  std::unique_ptr<PeerChunkClient> MakeClient() {
    return std::make_unique<PeerChunkClient>(
        PeerChunkClient::Options{.timeout = 1000ms,
                                 .health = {.suspect_for = 5000ms, .slow_after = 3},
                                 .clock = &clock_,
                                 .logger = std::make_shared<spdlog::logger>(
                                     "peer-chunk-client-test", std::make_shared<spdlog::sinks::null_sink_st>()),
                                 .on_newer_placement = [this] { ++newer_; }},
        &twin_);
  }
  std::vector<PeerChunkClient::Peer> Peers(uint64_t map_epoch) {
    return {{.name = "a", .endpoint = "tcp://a", .map_epoch = map_epoch},
            {.name = "b", .endpoint = "tcp://b", .map_epoch = map_epoch}};
  }
  proto::GetChunk Req() {
    proto::DatasetMeta meta{.name = "ds", .uid = 7, .version = 1};
    return PeerChunkClient::Request("ds", meta, 3, ChunkKey{.file = {.lo = 1, .hi = 2}, .index = 4}, false, 10);
  }

  SteppingClock clock_;
  TwinTransport twin_;
  int newer_ = 0;
  static constexpr uint64_t kLen = 1000;
};

TEST_F(PeerChunkClientTest, RequestNamesTheChunk) {
  const proto::GetChunk req = Req();
  EXPECT_EQ(req.dataset, "ds");
  EXPECT_EQ(req.uid, 7u);
  EXPECT_EQ(req.version, 1u);
  EXPECT_EQ(req.entry, 3u);
  EXPECT_EQ(req.index, 4u);
  EXPECT_EQ(req.key_lo, 1u);
  EXPECT_EQ(req.key_hi, 2u);
  EXPECT_FALSE(req.fill);
  EXPECT_EQ(req.placement_epoch, 10u);
}

// A busy peer is asked again, 10 ms then 20 ms later, and then serves.
TEST_F(PeerChunkClientTest, ABusyPeerIsAskedAgainAfterAGrowingWait) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kBusy, Answer::kBusy, Answer::kChunk});
  Result<PeerChunkClient::Bytes> r = client->FetchFrom(Peers(1)[0], Req(), kLen);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), kLen);
  EXPECT_EQ(twin_.asked("tcp://a"), 3);
  EXPECT_EQ(clock_.sleeps(), (std::vector<std::chrono::milliseconds>{10ms, 20ms}));
}

// Busy past every retry is an answer (kIoError), not a dead peer: the next
// peer serves, and the busy one is not suspect.
TEST_F(PeerChunkClientTest, APeerBusyPastItsRetriesIsAnsweredNotSuspect) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kBusy});
  twin_.Script("tcp://b", {Answer::kChunk});
  PeerChunkClient::Outcome got = client->Fetch(Peers(1), Req(), kLen);
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(got.failures[0].code(), Code::kIoError);
  EXPECT_EQ(twin_.asked("tcp://a"), 6);
  EXPECT_EQ(clock_.sleeps(), (std::vector<std::chrono::milliseconds>{10ms, 20ms, 40ms, 80ms, 160ms}));
  EXPECT_EQ(client->health().Check("tcp://a", 1, 1s), PeerHealth::Standing::kGood);
}

// A peer that answers kUnavailable itself (its own origin read failed) is
// not asked again (that would read the origin again), and is not suspect.
TEST_F(PeerChunkClientTest, AnUnavailableAnswerIsAnIoErrorWithoutRetry) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kUnavailable});
  Result<PeerChunkClient::Bytes> r = client->FetchFrom(Peers(1)[0], Req(), kLen);
  EXPECT_EQ(r.status().code(), Code::kIoError);
  EXPECT_EQ(twin_.asked("tcp://a"), 1);
  EXPECT_TRUE(clock_.sleeps().empty());
}

TEST_F(PeerChunkClientTest, FailsOverToTheNextPeerInOrder) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kNotFound});
  twin_.Script("tcp://b", {Answer::kChunk});
  PeerChunkClient::Outcome got = client->Fetch(Peers(1), Req(), kLen);
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(got.failures[0].code(), Code::kNotFound);
  EXPECT_TRUE(got.failures[1].ok());
  // A miss is an answer: "a" stays in good standing and is asked first again.
  got = client->Fetch(Peers(1), Req(), kLen);
  EXPECT_EQ(twin_.asked("tcp://a"), 2);
}

TEST_F(PeerChunkClientTest, AWrongLengthIsCorruptionAndTheNextPeerIsAsked) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kShort});
  twin_.Script("tcp://b", {Answer::kChunk});
  PeerChunkClient::Outcome got = client->Fetch(Peers(1), Req(), kLen);
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(got.failures[0].code(), Code::kCorruption);
}

TEST_F(PeerChunkClientTest, NoPeerServesTheLastFailure) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kNotFound});
  twin_.Script("tcp://b", {Answer::kNotFound});
  PeerChunkClient::Outcome got = client->Fetch(Peers(1), Req(), kLen);
  EXPECT_EQ(got.value.status().code(), Code::kNotFound);
  EXPECT_EQ(got.winner, -1);
}

// A peer that does not answer is skipped for suspect_for (on the client's
// Clock), then asked again; an answer ends the suspicion.
TEST_F(PeerChunkClientTest, AnUnreachablePeerIsSkippedUntilItsSuspicionEnds) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kNoAnswer, Answer::kChunk});
  twin_.Script("tcp://b", {Answer::kChunk});
  PeerChunkClient::Outcome got = client->Fetch(Peers(1), Req(), kLen);
  ASSERT_TRUE(got.value.ok());
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(got.failures[0].code(), Code::kUnavailable);

  clock_.Advance(4999ms);
  got = client->Fetch(Peers(1), Req(), kLen);
  EXPECT_EQ(got.winner, 1);
  EXPECT_EQ(twin_.asked("tcp://a"), 1) << "a suspect peer was asked";
  EXPECT_TRUE(got.failures[0].ok()) << "a skipped peer has no failure";

  clock_.Advance(1ms);
  got = client->Fetch(Peers(1), Req(), kLen);
  EXPECT_EQ(got.winner, 0) << "recovered: asked first again";
  EXPECT_EQ(twin_.asked("tcp://a"), 2);
  EXPECT_EQ(client->health().Check("tcp://a", 1, 1s), PeerHealth::Standing::kGood);
}

// A newer cluster map that still lists the peer (it restarted and
// registered again) ends its suspicion at once.
TEST_F(PeerChunkClientTest, ANewerMapEndsASuspicionAtOnce) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kNoAnswer, Answer::kChunk});
  twin_.Script("tcp://b", {Answer::kChunk});
  ASSERT_EQ(client->Fetch(Peers(1), Req(), kLen).winner, 1);
  ASSERT_EQ(client->Fetch(Peers(1), Req(), kLen).winner, 1);
  EXPECT_EQ(twin_.asked("tcp://a"), 1);
  EXPECT_EQ(client->Fetch(Peers(2), Req(), kLen).winner, 0);
  EXPECT_EQ(twin_.asked("tcp://a"), 2);
}

// Every peer suspect: nobody is asked, and the answer says so.
TEST_F(PeerChunkClientTest, EveryPeerSuspectAsksNobody) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kNoAnswer});
  twin_.Script("tcp://b", {Answer::kNoAnswer});
  PeerChunkClient::Outcome got = client->Fetch(Peers(1), Req(), kLen);
  EXPECT_EQ(got.value.status().code(), Code::kUnavailable);
  got = client->Fetch(Peers(1), Req(), kLen);
  EXPECT_EQ(got.value.status().code(), Code::kNotFound);
  EXPECT_EQ(twin_.asked("tcp://a") + twin_.asked("tcp://b"), 2);
}

TEST_F(PeerChunkClientTest, AReplyWithANewerPlacementIsReported) {
  auto client = MakeClient();
  twin_.Script("tcp://a", {Answer::kChunk, Answer::kNewerEpoch});
  ASSERT_TRUE(client->FetchFrom(Peers(1)[0], Req(), kLen).ok());
  EXPECT_EQ(newer_, 0);
  ASSERT_TRUE(client->FetchFrom(Peers(1)[0], Req(), kLen).ok());
  EXPECT_EQ(newer_, 1);
}

}  // namespace
}  // namespace hoard
